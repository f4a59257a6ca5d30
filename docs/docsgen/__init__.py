"""The docs' reference pages, generated from the code at build time so that they cannot drift.

``settings`` reads the sidecar's settings (``SidecarConfig``), ``cli`` the command line's
parser, ``protocol`` the protos' comments, ``metrics`` the Prometheus metrics the sidecar
registers; ``hook`` is the MkDocs hook that adds the pages they write to the site.
"""
