/**
 * A TCP proxy to Postgres for outage tests: `open()` forwards, `cut()` drops every connection and
 * refuses new ones (the database looks unreachable), `open()` again brings it back on the same port.
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export class TcpProxy {
  #server: Server | undefined;
  readonly #sockets = new Set<Socket>();
  constructor(
    readonly port: number,
    readonly target: { readonly host: string; readonly port: number },
  ) {}

  /** A proxy on a free port, forwarding to `target` once opened. */
  static async create(target: { host: string; port: number }): Promise<TcpProxy> {
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    return new TcpProxy(port, target);
  }

  /** `url` pointing at this proxy instead. */
  urlFor(url: string): string {
    const next = new URL(url);
    next.hostname = '127.0.0.1';
    next.port = String(this.port);
    return next.toString();
  }

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on('close', () => this.#sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.#server = server;
  }

  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const socket of this.#sockets) socket.destroy();
    if (server) await new Promise((resolve) => server.close(resolve));
  }
}
