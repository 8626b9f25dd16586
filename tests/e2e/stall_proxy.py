#!/usr/bin/python3
"""A TCP proxy on 127.0.0.1 that forwards to an upstream port, and stalls on demand.

While the file given with --stall-file exists, a request that starts on any connection (new or
kept alive) is swallowed: its bytes are read and dropped, nothing is forwarded and nothing is
answered, as an origin that accepts connections but never replies. When the file is removed
again, every stalled connection is closed (the client sees a reset and gives up at once), and new
requests are forwarded again.

  stall_proxy.py --upstream-port 4568 --stall-file F [--port-file P]

Stops on SIGTERM/SIGINT. Binds 127.0.0.1 only.
"""
import argparse
import asyncio
import os
import signal

CHUNK = 256 * 1024


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--listen-port", type=int, default=0)
    ap.add_argument("--stall-file", required=True)
    ap.add_argument("--port-file")
    a = ap.parse_args()
    stalled = set()  # writers of client connections that are stalled

    def stalling():
        return os.path.exists(a.stall_file)

    async def handle(creader, cwriter):
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", a.upstream_port)
        except OSError:
            cwriter.close()
            return

        async def up():  # client -> upstream, until a request arrives while stalling
            try:
                while True:
                    data = await creader.read(CHUNK)
                    if not data:
                        break
                    if stalling():
                        stalled.add(cwriter)
                        while await creader.read(CHUNK):
                            pass  # swallowed; closed by the watcher when the stall ends
                        break
                    uwriter.write(data)
                    await uwriter.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                uwriter.close()

        async def down():  # upstream -> client
            try:
                while True:
                    data = await ureader.read(CHUNK)
                    if not data:
                        break
                    cwriter.write(data)
                    await cwriter.drain()
            except (ConnectionError, OSError):
                pass

        await asyncio.gather(up(), down())
        stalled.discard(cwriter)
        cwriter.close()

    async def watcher():
        while True:
            await asyncio.sleep(0.1)
            if not stalling() and stalled:
                for w in list(stalled):
                    tr = w.transport
                    if tr is not None:
                        tr.abort()  # a reset: the client's request fails now
                stalled.clear()

    server = await asyncio.start_server(handle, "127.0.0.1", a.listen_port)
    port = server.sockets[0].getsockname()[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(a.port_file + ".tmp", a.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    w = asyncio.create_task(watcher())
    async with server:
        await stop.wait()
    w.cancel()


if __name__ == "__main__":
    asyncio.run(main())
