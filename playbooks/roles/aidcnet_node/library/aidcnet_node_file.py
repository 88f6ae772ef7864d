#!/usr/bin/python3
"""Ansible module: install an aidcnet node file and have the agent apply it, in one round trip.

Runs inside the node with the node's /usr/bin/python3 and talks to the agent's control socket directly,
so one `docker exec` does what a check task, copy(validate=) and a reload handler would do in five, with
no extra Python start-up for `aidcnet ctl`. That is what makes configure of a 280-node lab fit its time
budget: Ansible's cost is a round over every host per task, so each node gets exactly one.
  0. the node is what the plan assumes: its data interfaces exist and the forwarding sysctls that
     `aidclab deploy` sets have their values (read-only; a failure names the interface or sysctl);
  1. unchanged content: report ok, touch nothing;
  2. write a temporary file and ask the agent to apply it: the agent validates it (a bad value fails
     here, naming the field) and applies it atomically, keeping its old config on any error;
  3. only then move the file into place, so the file on disk is always the one the agent runs.
In check mode the agent only validates.
"""

import json
import os
import re
import socket
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: aidcnet_node_file
short_description: Install /etc/aidcnet/node.yml and have the aidcnet agent validate and apply it
options:
  content: {description: The node file (YAML), type: str, required: true}
  dest: {description: Where the agent reads it, type: str, default: /etc/aidcnet/node.yml}
  socket: {description: The agent's control socket, type: str, default: /run/aidcnet/control.sock}
  interfaces:
    {description: Data interfaces that must exist before the file is installed, type: list, elements: str}
  sysctls:
    {description: "Sysctls under /proc/sys/net and their values, e.g. {ipv4/ip_forward: 1}", type: dict}
"""


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


# A TCP-MD5 secret in the node file (bgp.neighbors[].md5_password), as to_nice_yaml writes it.
MD5_LINE = re.compile(r"^\s*md5_password:\s*(.+?)\s*$", re.M)


def secrets_in(text):
    """Every TCP-MD5 secret in a node file, as written and unquoted: Ansible masks each of them wherever it
    would show one (the diff, messages), since the secret must never reach output or logs."""
    found = set()
    for raw in MD5_LINE.findall(text or ""):
        found.add(raw)
        if len(raw) > 1 and raw[0] == raw[-1] == "'":
            found.add(raw[1:-1].replace("''", "'"))
        elif len(raw) > 1 and raw[0] == raw[-1] == '"':
            found.add(raw[1:-1])
    return found


def explain(reply, tmp, dest):
    lines = [str(reply.get("error", "")).replace(tmp, dest)]
    lines += ["  - " + p for p in reply.get("problems", [])]
    if reply.get("kept"):
        lines.append("the agent keeps running its previous config: " + reply["kept"])
    return "\n".join(lines)


def main():
    module = AnsibleModule(
        argument_spec={
            "content": {"type": "str", "required": True},
            "dest": {"type": "str", "default": "/etc/aidcnet/node.yml"},
            "socket": {"type": "str", "default": "/run/aidcnet/control.sock"},
            "interfaces": {"type": "list", "elements": "str", "default": []},
            "sysctls": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    content, dest, control = module.params["content"], module.params["dest"], module.params["socket"]
    problems = node_problems(module.params["interfaces"], module.params["sysctls"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    try:
        with open(dest) as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    secrets = secrets_in(content) | secrets_in(current)
    module.no_log_values.update(secrets)
    if current == content:
        module.exit_json(changed=False, dest=dest)
    # Only under --diff: the two files ride in every result through Ansible's queue, callbacks and
    # ansible-runner's event files otherwise, two node files per host for nothing.
    diff = {"before": current or "", "after": content, "before_header": dest, "after_header": dest}
    shown = {"diff": diff} if module._diff else {}
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".node-", suffix=".yml", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
        try:
            reply = ask(control, "validate" if module.check_mode else "reload", file=tmp)
        except OSError as exc:
            module.fail_json(msg=f"no aidcnet agent answers on {control} ({exc}); check: docker logs <node>")
        if not reply.get("ok"):
            module.fail_json(
                msg=f"the new node file was rejected, {dest} is unchanged: " + explain(reply, tmp, dest)
            )
        if module.check_mode:
            module.exit_json(changed=True, **shown)
        os.chmod(tmp, 0o600 if secrets_in(content) else 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    module.exit_json(changed=True, applied=reply.get("applied"), **shown)


if __name__ == "__main__":
    main()
