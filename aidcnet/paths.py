"""Where a node's agent keeps its files; kept free of heavy imports so `aidcnet ctl` starts fast."""

import os
from pathlib import Path

DEFAULT_CONFIG_PATH = Path("/etc/aidcnet/node.yml")
CONTROL_SOCKET = Path(os.environ.get("AIDCNET_CONTROL_SOCKET", "/run/aidcnet/control.sock"))
