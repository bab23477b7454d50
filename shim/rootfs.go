package main

// The container's root filesystem becomes a sandboxd runtime: the shim
// packs it into a tar in the bundle and runtime.import unpacks it, with the
// daemon's rules for untrusted trees (docs/API.md "runtime.import": no
// member written through a symlink, no device nodes, no setuid bits).

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// tarTree writes the tree at root to a new file out (mode 0600, created
// exclusively): directories, regular files, symlinks and hard links with
// numeric owners, modes and times. Symlinks are stored, never followed;
// device nodes, FIFOs and sockets are left out (runtime.import would skip
// them). The walk stays on root's filesystem and the mounts below it.
func tarTree(root, out string) (err error) {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(out)
		}
	}()
	tw := tar.NewWriter(f)
	type ino struct{ dev, ino uint64 }
	seen := map[ino]string{}
	err = filepath.Walk(root, func(path string, fi os.FileInfo, werr error) error {
		if werr != nil {
			return werr
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		mode := fi.Mode()
		if mode&(os.ModeDevice|os.ModeCharDevice|os.ModeNamedPipe|os.ModeSocket) != 0 {
			return nil
		}
		link := ""
		if mode&os.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if mode.IsRegular() && st.Nlink > 1 {
				k := ino{uint64(st.Dev), st.Ino}
				if first, ok := seen[k]; ok {
					hdr.Typeflag = tar.TypeLink
					hdr.Linkname = first
					hdr.Size = 0
					return tw.WriteHeader(hdr)
				}
				seen[k] = hdr.Name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !mode.IsRegular() {
			return nil
		}
		src, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer src.Close()
		n, err := io.Copy(tw, src)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed size while being packed", path)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("packing the rootfs %s: %w", root, err)
	}
	return tw.Close()
}
