"""A tiny recording TCP proxy: everything a client sends to the server, kept in memory."""

from __future__ import annotations

import contextlib
import socket
import threading


class RecordingProxy:
    """Listens on a free loopback port and forwards to ``target``; ``sent`` holds every
    byte clients sent to the server, ``received`` every byte it answered."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sent = bytearray()
        self.received = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, server]
            threading.Thread(
                target=self._pump, args=(client, server, self.sent), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, self.received), daemon=True
            ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bytearray) -> None:
        try:
            while chunk := source.recv(65536):
                with self._lock:
                    record.extend(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for connection in self._sockets:
            connection.close()
