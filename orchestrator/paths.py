"""Where the project's own files live (aidclab runs from its source tree: `pip install -e .`)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABS = ROOT / "labs"
PLAYBOOKS = ROOT / "playbooks"
ANSIBLE_CFG = ROOT / "ansible.cfg"
NODE_IMAGES = ROOT / "node-images"
CACHE = ROOT / ".cache"
