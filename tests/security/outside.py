"""What lies in a folder, to prove an attack changed nothing there: every path under it
with its kind and content (a file's SHA-256, a link's target)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_state(root: Path) -> dict[str, str]:
    """``relative path -> "file <sha256>" | "link <target>" | "folder"`` of everything
    under ``root``, links not followed."""
    state = {}
    for folder, folders, names in os.walk(root):
        for name in folders + names:
            path = Path(folder) / name
            relative = str(path.relative_to(root))
            if path.is_symlink():
                state[relative] = f"link {os.readlink(path)}"
            elif path.is_dir():
                state[relative] = "folder"
            else:
                state[relative] = f"file {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return state
