#!/usr/bin/env python3
"""A TCP proxy the end-to-end run kills to cut Postgres from the balancer.

usage: tcp_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT
"""
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main():
    listen_host, listen_port = sys.argv[1].rsplit(":", 1)
    target_host, target_port = sys.argv[2].rsplit(":", 1)

    async def serve(client_reader, client_writer):
        try:
            reader, writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))

    server = await asyncio.start_server(serve, listen_host, int(listen_port))
    async with server:
        await server.serve_forever()


asyncio.run(main())
