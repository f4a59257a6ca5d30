// The tests' TCP proxy drops a connection with a reset where Node can send one, and never leaves
// a handle that keeps the process from exiting (issue 36).
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { drop, tcpProxy } from './proxy.js';
import { WAIT_MS, within } from './sidecar.js';

let server;
let port;

before(async () => {
  server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  port = server.address().port;
});

after(async () => {
  server.close();
  await once(server, 'close');
});

/** A connection to `server`: the client's socket and the server's side of it. */
async function connection() {
  const accepted = once(server, 'connection');
  const client = net.connect(port, '127.0.0.1');
  const [socket] = await accepted;
  return { client, socket };
}

test('dropping a socket whose write side has ended closes it', async () => {
  const { client, socket } = await connection();
  client.on('error', () => {});
  socket.end(); // its shutdown request is pending now: a reset would be refused
  drop(socket);
  await within(once(socket, 'close'), WAIT_MS, "the dropped socket's close");
  client.destroy();
});

test('dropping an open socket resets the connection', async () => {
  const { client, socket } = await connection();
  const failed = once(client, 'error');
  drop(socket);
  const [error] = await within(failed, WAIT_MS, 'the reset reaching the peer');
  assert.equal(error.code, 'ECONNRESET');
  await once(socket, 'close');
});

test('a proxy connects to its current target, and a cut drops what it carries', async () => {
  const proxy = await tcpProxy('127.0.0.1:1');
  try {
    proxy.target = `127.0.0.1:${port}`;
    const accepted = once(server, 'connection');
    const split = proxy.address.lastIndexOf(':');
    const client = net.connect(Number(proxy.address.slice(split + 1)), '127.0.0.1');
    client.on('error', () => {}); // the reset
    const closed = new Promise((resolve) => client.once('close', resolve));
    const [socket] = await accepted;
    socket.on('error', () => {}); // the proxy's side of it is reset too
    proxy.cut();
    await within(closed, WAIT_MS, "the cut connection's close at the client");
    socket.destroy();
  } finally {
    await proxy.close();
  }
});

test('a proxy pointed at nothing closes each new connection, and reaches no one', async () => {
  const proxy = await tcpProxy(`127.0.0.1:${port}`);
  try {
    proxy.target = null;
    let reached = false;
    const count = () => {
      reached = true;
    };
    server.on('connection', count);
    const split = proxy.address.lastIndexOf(':');
    const client = net.connect(Number(proxy.address.slice(split + 1)), '127.0.0.1');
    client.on('error', () => {}); // a reset, should the proxy close before the client's read
    await within(once(client, 'close'), WAIT_MS, "the refused connection's close at the client");
    server.off('connection', count);
    assert.equal(reached, false, 'the proxy connected to its old target');
  } finally {
    await proxy.close();
  }
});
