"""A host for tests/stdio_owner.rs: starts ARGV with its stdin and stdout on pipes
(``pipes``) or on socketpairs, as Node's child_process does (``sockets``), holds their
far ends itself, and obeys one command a line on its own stdin, answering one line:

  send TEXT         write TEXT and a newline to the server's stdin
  close-stdin       close the server's stdin (its writer is gone)
  close-stdout      close the server's stdout (its reader is gone)
  feed N            write N bytes to the server's stdin, then close it, while reading
                    the server's stdout to its end; answer "fed N got M same|differ"
  wait              wait for the server; answer "exit <status>"

Its first line is the server's pid. Standard library only.
"""

import socket
import subprocess
import sys
import threading

mode, argv = sys.argv[1], sys.argv[2:]
if mode == "sockets":
    host_in, server_in = socket.socketpair()
    host_out, server_out = socket.socketpair()
    server = subprocess.Popen(argv, stdin=server_in.fileno(), stdout=server_out.fileno())
    server_in.close()
    server_out.close()
    writer = host_in.makefile("wb", buffering=0)
    reader = host_out.makefile("rb", buffering=0)
    host_in.close()
    host_out.close()
else:
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    writer, reader = server.stdin, server.stdout
print(server.pid, flush=True)


def pattern(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "send":
        writer.write(line.split(" ", 1)[1].rstrip("\n").encode() + b"\n")
        writer.flush()
        print("sent", flush=True)
    elif cmd[0] == "close-stdin":
        writer.close()
        print("closed stdin", flush=True)
    elif cmd[0] == "close-stdout":
        reader.close()
        print("closed stdout", flush=True)
    elif cmd[0] == "feed":
        n = int(cmd[1])
        got = []
        pump = threading.Thread(target=lambda: got.append(reader.read()))
        pump.start()
        writer.write(pattern(n))
        writer.close()
        pump.join()
        data = got[0] or b""
        same = "same" if data == pattern(n) else "differ"
        print(f"fed {n} got {len(data)} {same}", flush=True)
    elif cmd[0] == "wait":
        print(f"exit {server.wait()}", flush=True)
