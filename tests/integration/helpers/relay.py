#!/usr/bin/env python3
"""relay.py — integration-test helper: plain TCP relays, LISTEN=TARGET pairs.

  relay.py 127.0.0.1:35432=10.231.7.1:35432 127.0.0.1:39092=10.231.7.1:39092

Each argument listens on LISTEN (host:port) and relays every connection,
byte for byte in both directions, to TARGET. netns.sh starts one inside a
test host's network namespace (its own 127.0.0.1 to the host side of its
veth pair) and one on the host (that veth address to the servers'
127.0.0.1), so a service in the namespace uses the suite's configuration
unchanged, Kafka's advertised 127.0.0.1 listeners included, while its
traffic crosses the veth pair, where nft can cut it. An established
connection whose packets are dropped hangs as it would across a real
partition (no reset); a new one is accepted and closed once its upstream
connect fails. Prints "ready" once every listener is bound.
"""
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


def handler(host, port):
    async def serve(cr, cw):
        try:
            ur, uw = await asyncio.open_connection(host, port)
        except (ConnectionError, OSError):
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))
    return serve


def split(hp):
    host, _, port = hp.rpartition(":")
    return host, int(port)


async def main(pairs):
    servers = []
    for pair in pairs:
        listen, _, target = pair.partition("=")
        lh, lp = split(listen)
        th, tp = split(target)
        servers.append(await asyncio.start_server(handler(th, tp), lh, lp, reuse_address=True))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit("usage: relay.py LISTEN_HOST:PORT=TARGET_HOST:PORT...")
    asyncio.run(main(sys.argv[1:]))
