// A TCP proxy the tests put between a client and a sidecar, to drop its connections at will.
import net from 'node:net';

/**
 * Drop one end of a proxied connection, the way a crash drops it: with a TCP reset where Node
 * can send one, else a plain close.
 *
 * Node 20 cannot reset a socket whose write side has ended (`end()`, which `pipe()` calls when
 * the other side ends, and which a socket calls itself on the peer's FIN): libuv refuses the
 * reset while the shutdown request is pending (UV_EINVAL), yet Node marks the handle as
 * closing, so it is never closed. That TCP handle then stays in the process's handle list, and
 * the process's exit spins for ever waiting for it (issue 36). Such a socket is destroyed
 * instead, which closes it with the pending shutdown cancelled; a socket still connecting has
 * nothing to reset.
 *
 * @param {net.Socket} socket
 */
export function drop(socket) {
  if (socket.writableEnded || socket.connecting) socket.destroy();
  else socket.resetAndDestroy();
}

/**
 * A TCP proxy that connects each new connection to `proxy.target` (which a test may point
 * elsewhere, at a restarted sidecar), and whose `cut()` drops every connection at once.
 *
 * While `proxy.target` is `null` each new connection is closed at once, as a dead sidecar's
 * port would refuse it. A test that kills a sidecar points the proxy at nothing until the next
 * one listens: the dead sidecar's port is free, and another process's sidecar (the test files
 * run side by side) may be given it meanwhile, and would answer a re-attach NOT_FOUND.
 *
 * @param {string | null} target  `host:port`
 */
export async function tcpProxy(target) {
  const sockets = new Set();
  const server = net.createServer((downstream) => {
    if (proxy.target === null) {
      downstream.destroy();
      return;
    }
    const split = proxy.target.lastIndexOf(':');
    const upstream = net.connect(Number(proxy.target.slice(split + 1)), proxy.target.slice(0, split));
    for (const socket of [downstream, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {}); // resets and refusals are what this proxy is for
      socket.on('close', () => {
        sockets.delete(socket);
        downstream.destroy();
        upstream.destroy();
      });
    }
    downstream.pipe(upstream);
    upstream.pipe(downstream);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxy = {
    target,
    address: `127.0.0.1:${server.address().port}`,
    /** Drop every connection through the proxy now; new ones are accepted as before. */
    cut() {
      for (const socket of sockets) drop(socket);
    },
    /** Drop every connection and stop listening. */
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
  return proxy;
}
