#!/usr/bin/env python3
"""Host-side helpers for tests/lab/lab.sh (standard library only).

  labpy.py vmlinux BZIMAGE OUT     extract the uncompressed vmlinux (ELF) from an
                                   xz-compressed x86 bzImage
  labpy.py cpio DIR OUT            write DIR as an uncompressed newc cpio archive
                                   (owner root, mtime 0, sorted: reproducible)
  labpy.py libclosure PKG...       print PKG... plus the library packages (lib*, zlib*)
                                   they depend on, recursively (first alternative of each
                                   dependency), using `apt-cache show`
"""
import lzma
import os
import re
import stat
import subprocess
import sys

XZ_MAGIC = b"\xfd7zXZ\x00"


def vmlinux(src, out):
    data = open(src, "rb").read()
    pos = data.find(XZ_MAGIC)
    tried = 0
    while pos >= 0 and tried < 16:
        tried += 1
        try:
            dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            body = dec.decompress(data[pos:])
        except lzma.LZMAError:
            body = b""
        if body[:4] == b"\x7fELF":
            tmp = out + ".tmp"
            with open(tmp, "wb") as f:
                f.write(body)
            os.replace(tmp, out)
            return 0
        pos = data.find(XZ_MAGIC, pos + 1)
    sys.stderr.write("labpy: no xz-compressed ELF found in %s\n" % src)
    return 1


def _cpio_entry(out, name, mode, size, nlink, rdev=0, data=b""):
    ino = _cpio_entry.ino = getattr(_cpio_entry, "ino", 0) + 1
    namez = name.encode() + b"\x00"
    hdr = "070701" + "".join(
        "%08X" % v
        for v in (ino, mode, 0, 0, nlink, 0, size, 0, 0, os.major(rdev), os.minor(rdev), len(namez), 0)
    )
    buf = hdr.encode() + namez
    buf += b"\x00" * ((4 - len(buf) % 4) % 4)
    out.write(buf)
    if data:
        out.write(data)
        out.write(b"\x00" * ((4 - len(data) % 4) % 4))


def cpio(root, outpath):
    tmp = outpath + ".tmp"
    with open(tmp, "wb") as out:
        entries = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            for n in sorted(dirnames) + sorted(filenames):
                entries.append(os.path.normpath(os.path.join(rel, n)))
        for rel in sorted(entries, key=lambda p: (p.count("/"), p)):
            full = os.path.join(root, rel)
            st = os.lstat(full)
            perm = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(full).encode()
                _cpio_entry(out, rel, stat.S_IFLNK | 0o777, len(target), 1, data=target)
            elif stat.S_ISDIR(st.st_mode):
                _cpio_entry(out, rel, stat.S_IFDIR | perm, 0, 2)
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    data = f.read()
                _cpio_entry(out, rel, stat.S_IFREG | perm, len(data), 1, data=data)
            else:
                sys.stderr.write("labpy: skipping special file %s\n" % rel)
        _cpio_entry(out, "TRAILER!!!", 0, 0, 1)
    os.replace(tmp, outpath)
    return 0


def libclosure(pkgs):
    seen = []
    todo = list(pkgs)
    for _ in range(50):
        batch = [p for p in dict.fromkeys(todo) if p not in seen]
        todo = []
        if not batch:
            break
        seen.extend(batch)
        res = subprocess.run(
            ["apt-cache", "show", "--no-all-versions", *batch], capture_output=True, text=True
        )
        if res.returncode != 0:
            sys.stderr.write("labpy: apt-cache show failed: %s\n" % res.stderr.strip())
            return 1
        for line in res.stdout.splitlines():
            if not line.startswith(("Depends:", "Pre-Depends:")):
                continue
            for dep in line.split(":", 1)[1].split(","):
                name = dep.split("|")[0].strip().split()[0].split(":")[0]
                if re.match(r"^(lib|zlib)", name) and name not in seen:
                    todo.append(name)
    print("\n".join(sorted(seen)))
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "vmlinux" and len(argv) == 4:
        return vmlinux(argv[2], argv[3])
    if len(argv) >= 2 and argv[1] == "cpio" and len(argv) == 4:
        return cpio(argv[2], argv[3])
    if len(argv) >= 3 and argv[1] == "libclosure":
        return libclosure(argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
