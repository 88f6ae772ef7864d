"""A ping-sized UDP probe and its echo, run with the host's interpreter inside two namespaces (a netns
test's or a lab node's): the round trip of a link or a path, measured as ping would.

``ECHO_SERVER ADDRESS IDLE_S`` echoes every datagram on ADDRESS:7777 until IDLE_S pass without one;
``PROBE ADDRESS COUNT TIMEOUT_S`` prints the COUNT round trips (wall seconds) as a JSON list.
"""

ECHO_SERVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7777))
s.settimeout(float(sys.argv[2]))
try:
    while True:
        data, addr = s.recvfrom(2048)
        s.sendto(data, addr)
except socket.timeout:
    pass
"""

# Ping-sized: 56 bytes of payload, as ping sends; the frame is 98 bytes with UDP, IPv4 and Ethernet.
PROBE = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(float(sys.argv[3]))
rtts = []
for i in range(int(sys.argv[2])):
    t = time.monotonic()
    s.sendto(i.to_bytes(4, "big") + bytes(52), (sys.argv[1], 7777))
    while True:
        data, _ = s.recvfrom(2048)
        if int.from_bytes(data[:4], "big") == i:
            break
    rtts.append(time.monotonic() - t)
print(json.dumps(rtts))
"""
PROBE_FRAME_BYTES = 98
