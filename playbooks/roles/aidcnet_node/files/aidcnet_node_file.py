"""The node's half of the ``aidcnet_node_file`` action (action_plugins/aidcnet_node_file.py): installs
/etc/aidcnet/node.yml and has the agent apply it, in one process started in the node.

It runs in aidcnet's own Python (/opt/aidcnet/bin/python, which has libyaml), reads one request from
stdin and writes one JSON reply to stdout. Steps:
  0. the node is what the plan assumes: its data interfaces exist and the forwarding sysctls that
     `aidclab deploy` sets have their values (a failure names the interface or sysctl);
  1. the node file is rendered from the request's data; unchanged: report ok, touch nothing;
  2. write a temporary file and ask the agent to apply it (check mode: only to validate): the agent names
     the field of a bad value and keeps its old config on any error;
  3. only then move the file into place, so the file on disk is always the one the agent runs.
TCP-MD5 secrets (bgp.neighbors[].md5_password) never leave the node in a reply: a diff or an error shows
them as ********, and a file holding one is mode 0600.

The agent's control protocol is aidcnet.agent.control's; its two requests are written here by hand because
importing the agent's client costs more than this whole step.
"""

import json
import os
import socket
import sys
import tempfile

import yaml

MASK = "********"


def node_problems(interfaces, sysctls):
    """Why this node is not the one the plan describes (empty when it is)."""
    problems = [
        f"interface {name} is missing: is the lab deployed as planned? (aidclab linkcheck)"
        for name in interfaces
        if not os.path.exists(f"/sys/class/net/{name}")
    ]
    for key, want in sysctls.items():
        try:
            with open(f"/proc/sys/net/{key}") as f:
                have = f.read().strip()
        except OSError as exc:
            have = f"unreadable ({exc.strerror})"
        if have.split() != str(want).split():  # ip_local_port_range reads back tab-separated
            name = "net." + key.replace("/", ".")
            problems.append(f"{name} is {have}, want {want} (set at docker run by aidclab deploy)")
    return problems


def render(node):
    """The node file's text: the same data always gives the same bytes, so an unchanged plan is no change."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(node, Dumper=dumper, sort_keys=False, default_flow_style=False, indent=2, width=1 << 16)


def secrets_of(node):
    """Every TCP-MD5 secret a node file holds."""
    bgp = (node or {}).get("bgp") if isinstance(node, dict) else None
    neighbors = (bgp or {}).get("neighbors") or []
    return {str(n["md5_password"]) for n in neighbors if isinstance(n, dict) and n.get("md5_password")}


def masked(text, secrets):
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def shown(node):
    """The node file as a diff may show it: rendered from the data with every secret replaced, so no
    quoting or escaping YAML gives a secret can slip past."""
    if not isinstance(node, dict) or not secrets_of(node):
        return render(node)
    copy = json.loads(json.dumps(node))
    for neighbor in copy["bgp"]["neighbors"]:
        if isinstance(neighbor, dict) and neighbor.get("md5_password"):
            neighbor["md5_password"] = MASK
    return render(copy)


def ask(path, op, **fields):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    try:
        sock.connect(path)
        sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    return json.loads(data)


def explain(reply, tmp, dest):
    lines = [str(reply.get("error", "")).replace(tmp, dest)]
    lines += ["  - " + p for p in reply.get("problems", [])]
    if reply.get("kept"):
        lines.append("the agent keeps running its previous config: " + reply["kept"])
    return "\n".join(lines)


def install(request):
    """The reply to one request: {"changed": ...} or {"failed": true, "msg": ...}."""
    node, dest, control = request["node"], request["dest"], request["socket"]
    problems = node_problems(request.get("interfaces", []), request.get("sysctls", {}))
    if problems:
        return {"failed": True, "msg": "; ".join(problems)}
    content = render(node)
    try:
        with open(dest) as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if current == content:
        return {"changed": False, "dest": dest}
    try:
        old = yaml.safe_load(current) if current else None
    except yaml.YAMLError:
        old = None
    secrets = secrets_of(node) | secrets_of(old)
    reply = {"changed": True, "dest": dest}
    if request.get("diff"):
        before = shown(old) if isinstance(old, dict) else masked(current or "", secrets)
        reply["diff"] = {"before": before, "after": shown(node), "before_header": dest, "after_header": dest}
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".node-", suffix=".yml", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
        try:
            answer = ask(control, "validate" if request.get("check") else "reload", file=tmp)
        except OSError as exc:
            why = f"no aidcnet agent answers on {control} ({exc}); check: docker logs <node>"
            return {"failed": True, "msg": why}
        if not answer.get("ok"):
            why = masked(explain(answer, tmp, dest), secrets)
            return {"failed": True, "msg": f"the new node file was rejected, {dest} is unchanged: {why}"}
        if request.get("check"):
            return reply
        os.chmod(tmp, 0o600 if secrets_of(node) else 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    reply["applied"] = answer.get("applied")
    return reply


if __name__ == "__main__":
    print(json.dumps(install(json.load(sys.stdin))))
