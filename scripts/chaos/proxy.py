#!/usr/bin/env python3
"""TCP proxies the chaos run puts between each service instance and each backing service.

    proxy.py --control PORT NAME=LISTEN:TARGET ...

Each NAME forwards 127.0.0.1:LISTEN to 127.0.0.1:TARGET. The control port takes one command
per connection, a line, and answers one line:

    cut NAME SECS   every open connection of NAME is closed at once and new ones are refused
                    (the listening socket is closed) for SECS seconds, then NAME listens again
    restore NAME    listen again now
    status          one word per route: NAME=up or NAME=cut

Python standard library only.
"""

import argparse
import socket
import sys
import threading
import time


class Route:
    def __init__(self, name, listen, target):
        self.name, self.listen, self.target = name, listen, target
        self.lock = threading.Lock()
        self.conns = set()
        self.server = None
        self.cut_until = 0.0
        self.generation = 0

    def open(self):
        with self.lock:
            if self.server is not None:
                return
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            for _ in range(100):
                try:
                    server.bind(("127.0.0.1", self.listen))
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise SystemExit(f"proxy {self.name}: cannot listen on {self.listen}")
            server.listen(256)
            self.server = server
            self.generation += 1
            generation = self.generation
        threading.Thread(target=self.accept, args=(server, generation), daemon=True).start()

    def cut(self, secs):
        with self.lock:
            self.cut_until = time.monotonic() + secs
            server, self.server = self.server, None
            conns, self.conns = self.conns, set()
        if server is not None:
            close(server)
        for conn in conns:
            close(conn)
        generation = self.generation
        threading.Timer(secs, self.restore_if, args=(generation,)).start()

    def restore_if(self, generation):
        if self.generation == generation and time.monotonic() >= self.cut_until - 0.01:
            self.open()

    def restore(self):
        self.cut_until = 0.0
        self.open()

    def accept(self, server, generation):
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            if self.generation != generation:
                close(client)
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                upstream.settimeout(None)
            except OSError:
                close(client)
                continue
            with self.lock:
                if self.server is not server:
                    close(client)
                    close(upstream)
                    continue
                self.conns.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(source, sink), daemon=True).start()

    def pump(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            close(sock)
        with self.lock:
            self.conns.discard(source)
            self.conns.discard(sink)


def close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def serve_control(port, routes):
    control = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    control.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    control.bind(("127.0.0.1", port))
    control.listen(16)
    print(f"proxy: control on {port}, {len(routes)} routes", flush=True)
    while True:
        conn, _ = control.accept()
        with conn:
            words = conn.makefile().readline().split()
            try:
                answer = command(words, routes)
            except (KeyError, ValueError, IndexError) as error:
                answer = f"error {error!r}"
            conn.sendall((answer + "\n").encode())


def command(words, routes):
    if words[0] == "cut":
        routes[words[1]].cut(float(words[2]))
        return "ok"
    if words[0] == "restore":
        routes[words[1]].restore()
        return "ok"
    if words[0] == "status":
        return " ".join(f"{n}={'up' if r.server else 'cut'}" for n, r in routes.items())
    raise ValueError(words[0])


def send(port, line, timeout=5):
    """Sends one control command and returns the answer (used by run.py)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall((line + "\n").encode())
        return conn.makefile().readline().strip()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("routes", nargs="+")
    args = parser.parse_args()
    routes = {}
    for spec in args.routes:
        name, ports = spec.split("=")
        listen, target = ports.split(":")
        routes[name] = Route(name, int(listen), int(target))
    for route in routes.values():
        route.open()
    serve_control(args.control, routes)


if __name__ == "__main__":
    sys.exit(main())
