"""A loopback TCP proxy for tests and benchmarks that put something between a client and a
local server (moto's S3 server): latency, faults, a record of the requests.

`LoopbackProxy(target)` listens on a free port of 127.0.0.1 and forwards every connection to
`127.0.0.1:target`, in an asyncio loop on its own thread. Subclasses change what happens to a
connection (`handle`) or to each chunk a client sends (`on_client_chunk`). It stops with
`stop()` (or leaving a `with` block), or by itself after `lifetime_s`.
"""

from __future__ import annotations

import asyncio
import socket
import threading

HTTP_METHODS = (b"GET ", b"PUT ", b"HEAD ", b"POST ", b"DELETE ")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackProxy:
    def __init__(self, target: int, lifetime_s: float | None = None):
        self.target, self.lifetime_s = target, lifetime_s
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "LoopbackProxy":
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self.handle, "127.0.0.1", self.port)
        self._ready.set()
        try:
            await asyncio.wait_for(self._stop.wait(), self.lifetime_s)
        except asyncio.TimeoutError:
            pass
        server.close()
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def on_client_chunk(self, data: bytes) -> None:
        """Called before each chunk from the client is forwarded (may wait)."""

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        """Forward one connection both ways."""
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            client_w.close()
            return

        async def pipe(reader, writer, upstream: bool) -> None:
            try:
                while data := await reader.read(1 << 16):
                    if upstream:
                        await self.on_client_chunk(data)
                    writer.write(data)
                    await writer.drain()
            except OSError:
                pass
            finally:
                writer.close()

        await asyncio.gather(pipe(client_r, server_w, True), pipe(server_r, client_w, False))


class LatencyProxy(LoopbackProxy):
    """Holds each HTTP request (a client chunk that starts with a method) for `latency_s`
    before forwarding it (a stand-in for an object store's first-byte latency), and records
    its request line (`request_lines`: "GET /bucket/key?query")."""

    def __init__(self, target: int, latency_s: float, lifetime_s: float | None = None):
        super().__init__(target, lifetime_s)
        self.latency_s = latency_s
        self.request_lines: list[str] = []

    @property
    def requests(self) -> int:
        return len(self.request_lines)

    async def on_client_chunk(self, data: bytes) -> None:
        if data.startswith(HTTP_METHODS):
            line = data.split(b"\r\n", 1)[0].decode("latin-1")
            self.request_lines.append(line.rsplit(" ", 1)[0] if line.endswith(("HTTP/1.1", "HTTP/1.0")) else line)
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
