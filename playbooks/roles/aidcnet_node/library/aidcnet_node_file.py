#!/usr/bin/python3
"""Ansible module: install an aidcnet node file and reload the agent, in one round trip.

Runs inside the node. The same steps as copy(validate=) + a reload handler, but one `docker exec`
instead of four, which is what makes configure of a 68-node lab fit its time budget:
  1. unchanged content: report ok, touch nothing;
  2. write a temporary file, `aidcnet ctl validate` it (a bad value fails here, naming the field, and
     the old file stays);
  3. move it into place and `aidcnet ctl reload` (the agent applies atomically or keeps its old config).
"""

import os
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: aidcnet_node_file
short_description: Install /etc/aidcnet/node.yml, validate it in the node, reload the agent if it changed
options:
  content: {description: The node file (YAML), type: str, required: true}
  dest: {description: Where the agent reads it, type: str, default: /etc/aidcnet/node.yml}
"""


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def main():
    module = AnsibleModule(
        argument_spec={
            "content": {"type": "str", "required": True},
            "dest": {"type": "str", "default": "/etc/aidcnet/node.yml"},
        },
        supports_check_mode=True,
    )
    content, dest = module.params["content"], module.params["dest"]
    try:
        with open(dest) as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if current == content:
        module.exit_json(changed=False, dest=dest)
    diff = {"before": current or "", "after": content, "before_header": dest, "after_header": dest}
    fd, tmp = tempfile.mkstemp(prefix=".node-", suffix=".yml", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(content)
        code, out = run(["aidcnet", "ctl", "validate", tmp])
        if code != 0:
            module.fail_json(
                msg=f"the new node file was rejected, {dest} is unchanged: {out.replace(tmp, dest)}"
            )
        if module.check_mode:
            module.exit_json(changed=True, diff=diff)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    code, out = run(["aidcnet", "ctl", "reload"])
    if code != 0:
        module.fail_json(msg=f"the agent rejected {dest} and keeps its previous config: {out}", diff=diff)
    module.exit_json(changed=True, diff=diff, reload=out)


if __name__ == "__main__":
    main()
