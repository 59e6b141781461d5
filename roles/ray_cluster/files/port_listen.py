"""Listen for a while on the given ADDRESS,PORT,PEERS (one argument each)
until PEERS connections came or SECONDS passed; print, as JSON,
{"ADDRESS,PORT": state}: "reached" (every peer connected), "listening"
(not every peer came), "in use" (something listens there already: the
running service; the peers connect to it) or "cannot bind: <why>".
usage: port_listen.py SECONDS ADDRESS,PORT,PEERS ..."""
import errno
import json
import select
import socket
import sys
import time

deadline = time.time() + float(sys.argv[1])
socks, out = {}, {}
for spec in sys.argv[2:]:
    address, port, peers = spec.rsplit(",", 2)
    key = "%s,%s" % (address, port)
    try:
        s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address.strip("[]"), int(port)))
        s.listen(16)
        socks[s] = [key, int(peers)]
        out[key] = "listening"
    except OSError as e:
        out[key] = "in use" if e.errno == errno.EADDRINUSE else "cannot bind: %s" % e.strerror
while socks and time.time() < deadline:
    ready = select.select(list(socks), [], [], 0.5)[0]
    for s in ready:
        conn = s.accept()[0]
        conn.close()
        socks[s][1] -= 1
        if socks[s][1] <= 0:
            out[socks[s][0]] = "reached"
            s.close()
            del socks[s]
print(json.dumps(out))
