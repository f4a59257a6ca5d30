"""The protocol reference: every service, RPC, message, field and enum of the protos, with the
comments written beside them, read from a descriptor set that protoc builds with source info.

An RPC's comment ends with an ``Errors:`` paragraph naming the statuses it answers with;
``rpcs`` splits it out so that the page can show it apart and the tests can check it.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

__all__ = ["PROTOS", "Element", "Rpc", "elements", "page", "rpcs"]

PROTOS = Path(__file__).resolve().parents[2] / "protos"
_ERRORS = re.compile(r"\n?Errors:\s*", re.S)
# Paths into FileDescriptorProto (descriptor.proto's field numbers).
_MESSAGE, _ENUM, _SERVICE = 4, 5, 6
_FIELD, _NESTED, _NESTED_ENUM, _ONEOF = 2, 3, 4, 8
_VALUE, _METHOD = 2, 2


@dataclass(frozen=True)
class Element:
    """A message, enum, service, or one of their fields, values or methods."""

    kind: str  #: "message", "field", "enum", "value", "service", "rpc", "oneof"
    name: str  #: its full name (package.Message.field)
    comment: str
    detail: str = ""  #: a field's type and number, an RPC's request and response
    children: list[Element] = field(default_factory=list)


@dataclass(frozen=True)
class Rpc:
    """An RPC with its comment split into what it does and the errors it answers with."""

    name: str
    does: str
    errors: str
    request: str
    response: str


def _descriptors() -> list[descriptor_pb2.FileDescriptorProto]:
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        include = str(Path(protoc.__file__).parent / "_proto")
        status = protoc.main(
            [
                "protoc",
                f"-I{PROTOS}",
                f"-I{include}",
                "--include_source_info",
                f"--descriptor_set_out={out}",
                *files,
            ]
        )
        if status != 0:
            raise RuntimeError(f"protoc failed on {PROTOS} ({status})")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(fds.file)


def _comments(proto: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    found = {}
    for location in proto.source_code_info.location:
        text = location.leading_comments.strip()
        if text:
            lines = [line.strip() for line in text.splitlines()]
            found[tuple(location.path)] = "\n".join(lines)
    return found


def _type(f: descriptor_pb2.FieldDescriptorProto) -> str:
    if f.type_name:
        name = f.type_name.lstrip(".")
    else:
        name = descriptor_pb2.FieldDescriptorProto.Type.Name(f.type).removeprefix("TYPE_").lower()
    repeated = f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    return ("repeated " if repeated else "") + name


def _message(
    m: descriptor_pb2.DescriptorProto,
    scope: str,
    path: tuple[int, ...],
    notes: dict[tuple[int, ...], str],
) -> Element:
    name = f"{scope}.{m.name}"
    children = []
    for i, f in enumerate(m.field):
        oneof = f" (oneof {m.oneof_decl[f.oneof_index].name})" if f.HasField("oneof_index") else ""
        children.append(
            Element(
                "field",
                f"{name}.{f.name}",
                notes.get((*path, _FIELD, i), ""),
                f"{_type(f)} = {f.number}{oneof}",
            )
        )
    for i, o in enumerate(m.oneof_decl):
        if not o.name.startswith("_"):  # proto3 optional fields' synthetic oneofs
            children.append(Element("oneof", f"{name}.{o.name}", notes.get((*path, _ONEOF, i), "")))
    for i, nested in enumerate(m.nested_type):
        children.append(_message(nested, name, (*path, _NESTED, i), notes))
    for i, e in enumerate(m.enum_type):
        children.append(_enum(e, name, (*path, _NESTED_ENUM, i), notes))
    return Element("message", name, notes.get(path, ""), children=children)


def _enum(
    e: descriptor_pb2.EnumDescriptorProto,
    scope: str,
    path: tuple[int, ...],
    notes: dict[tuple[int, ...], str],
) -> Element:
    name = f"{scope}.{e.name}"
    values = [
        Element("value", f"{name}.{v.name}", notes.get((*path, _VALUE, i), ""), str(v.number))
        for i, v in enumerate(e.value)
    ]
    return Element("enum", name, notes.get(path, ""), children=values)


def elements() -> list[Element]:
    """Every service, message and enum of the protos, by file in name order."""
    found = []
    for proto in _descriptors():
        if not proto.name.startswith("cleveragents/"):
            continue
        notes = _comments(proto)
        for i, s in enumerate(proto.service):
            methods = [
                Element(
                    "rpc",
                    f"{proto.package}.{s.name}.{m.name}",
                    notes.get((_SERVICE, i, _METHOD, j), ""),
                    f"{_stream(m.client_streaming)}{m.input_type.lstrip('.')} → "
                    f"{_stream(m.server_streaming)}{m.output_type.lstrip('.')}",
                )
                for j, m in enumerate(s.method)
            ]
            found.append(
                Element(
                    "service",
                    f"{proto.package}.{s.name}",
                    notes.get((_SERVICE, i), ""),
                    children=methods,
                )
            )
        for i, m in enumerate(proto.message_type):
            found.append(_message(m, proto.package, (_MESSAGE, i), notes))
        for i, e in enumerate(proto.enum_type):
            found.append(_enum(e, proto.package, (_ENUM, i), notes))
    return found


def _stream(streaming: bool) -> str:
    return "stream " if streaming else ""


def rpcs() -> list[Rpc]:
    """Every RPC of every service, its comment split at ``Errors:``."""
    found = []
    for service in (e for e in elements() if e.kind == "service"):
        for method in service.children:
            does, errors = _split(method.comment)
            request, _, response = method.detail.partition(" → ")
            found.append(Rpc(method.name.rsplit(".", 1)[1], does, errors, request, response))
    return found


def _split(comment: str) -> tuple[str, str]:
    """What an RPC does, and the statuses after its ``Errors:``."""
    parts = _ERRORS.split(comment, maxsplit=1)
    return parts[0].strip(), (parts[1].strip() if len(parts) > 1 else "")


def _anchor(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


def page() -> str:
    """The protocol reference page, in Markdown."""
    out = [
        "# Protocol",
        "",
        "Generated from the comments in `protos/cleveragents/toolruntime/v1/` when the docs are",
        "built: every RPC with the statuses it answers with, then every message and enum. Any",
        "RPC also answers `UNAUTHENTICATED` when the sidecar requires credentials and the call",
        "has none that it accepts (health checking and nothing else is exempt).",
        "",
    ]
    found = elements()
    for service in (e for e in found if e.kind == "service"):
        out += [f"## Service `{service.name}`", "", _text(service.comment), ""]
        for rpc in rpcs():
            out += [
                f"### `{rpc.name}`",
                "",
                f"`{rpc.request}` → `{rpc.response}`",
                "",
                _text(rpc.does),
                "",
                f"**Errors.** {_text(rpc.errors)}",
                "",
            ]
    out += ["## Messages and enums", ""]
    for element in (e for e in found if e.kind != "service"):
        out += _element(element, 3)
    return "\n".join(out) + "\n"


def _element(element: Element, level: int) -> list[str]:
    short = element.name.split(".", 3)[-1]
    out = [f"{'#' * level} {element.kind.capitalize()} `{short}`", "", _text(element.comment), ""]
    rows = [c for c in element.children if c.kind in ("field", "value", "oneof")]
    if rows:
        head = (
            "| value | number | meaning |"
            if element.kind == "enum"
            else "| field | type | meaning |"
        )
        out += [head, "|---|---|---|"]
        for child in rows:
            out.append(
                f"| `{child.name.rsplit('.', 1)[1]}` | `{child.detail}` | {_cell(child.comment)} |"
            )
        out.append("")
    for child in element.children:
        if child.kind in ("message", "enum"):
            out += _element(child, min(level + 1, 6))
    return out


def _text(comment: str) -> str:
    """A comment's lines re-flowed into paragraphs."""
    paragraphs = [" ".join(p.split()) for p in comment.split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _cell(comment: str) -> str:
    return _text(comment).replace("\n\n", "<br>").replace("|", "\\|")
