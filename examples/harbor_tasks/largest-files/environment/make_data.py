"""Lays out /app/data with files of known sizes."""

from pathlib import Path

SIZES = {"readme.txt": 120, "logs/app.log": 9000, "logs/old/app.1.log": 15000, "img/logo.png": 4200,
         "img/banner.png": 12000, "cache/tmp.bin": 800, "notes.md": 8999}
for name, size in SIZES.items():
    path = Path("/app/data") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
