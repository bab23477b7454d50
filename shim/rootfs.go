package main

// The container's root filesystem becomes a sandboxd runtime: the shim
// packs it into a tar in the bundle and runtime.import unpacks it, with the
// daemon's rules for untrusted trees (docs/API.md "runtime.import": no
// member written through a symlink, no device nodes, no setuid bits).
//
// The tree is tenant-writable while it is packed, so it is walked from
// directory file descriptors only: every member is opened relative to its
// parent's fd with O_PATH|O_NOFOLLOW and judged by fstat of that fd, never
// by a path. A directory swapped for a symlink during the walk is packed
// as the symlink it then is; nothing outside the tree is ever read.

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// rootfsDirsEnv names, in containerd's environment (the shim inherits it),
// the host directories (absolute, separated by ":") below which an
// absolute spec root.path may lie, as `ctr run --rootfs DIR` makes it.
// Unset: an absolute root.path is refused.
const rootfsDirsEnv = "SANDBOXD_SHIM_ROOTFS_DIRS"

// openRootPath opens the container's root directory, spec root.path (or
// "rootfs", where the snapshot mounts are), for reading: a relative path
// is resolved inside bundle, an absolute one inside the directory of
// rootfsDirsEnv it lies below, with openat2(2) RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, so ".." out of it and a
// symlink in any component are refused. Returns the directory's fd (the
// caller closes it) or an error naming root.path.
func openRootPath(bundle, rootPath string) (int, error) {
	base, rel := bundle, rootPath
	if filepath.IsAbs(rootPath) {
		clean := filepath.Clean(rootPath)
		base = ""
		for _, d := range filepath.SplitList(os.Getenv(rootfsDirsEnv)) {
			if d == "" || !filepath.IsAbs(d) {
				continue
			}
			d = filepath.Clean(d)
			if clean == d {
				base, rel = d, "."
				break
			}
			if prefix := strings.TrimSuffix(d, "/") + "/"; strings.HasPrefix(clean, prefix) {
				base, rel = d, clean[len(prefix):]
				break
			}
		}
		if base == "" {
			return -1, fmt.Errorf("root.path %q: an absolute root.path must lie below a directory named in %s "+
				"(containerd's environment); give a path inside the bundle", rootPath, rootfsDirsEnv)
		}
	}
	bfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("root.path %q: opening %s: %w", rootPath, base, err)
	}
	defer unix.Close(bfd)
	fd, err := unix.Openat2(bfd, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return -1, fmt.Errorf("root.path %q: not a directory inside %s reached without symlinks: %w", rootPath, base, err)
	}
	return fd, nil
}

// tarTree writes the tree of the open directory rfd (named root in
// errors) to a new file out (mode 0600, created
// exclusively): directories, regular files, symlinks and hard links with
// numeric owners, modes and times. Symlinks are stored, never followed, in
// any component: each member is opened
// relative to its parent directory's fd (openat(2) O_PATH|O_NOFOLLOW, then
// fstat(2) of that fd decides its type; a regular file's content is read
// by reopening that very fd through /proc/self/fd). Device nodes, FIFOs
// and sockets are left out (runtime.import would skip them). The walk
// crosses into mounts below root. max > 0 bounds the tar: packing stops,
// with an error naming maxSourceBytes, before the members' sizes and
// headers would pass it (runtime.import refuses a larger tree anyway),
// so a huge or sparse file never fills the host's disk.
func tarTree(rfd int, root, out string, max int64) (err error) {
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
	p := &packer{tw: tar.NewWriter(f), seen: map[inode]string{}, max: max}
	if err = p.dir(rfd, ""); err != nil {
		return fmt.Errorf("packing the rootfs %s: %w", root, err)
	}
	return p.tw.Close()
}

type inode struct{ dev, ino uint64 }

type packer struct {
	tw    *tar.Writer
	seen  map[inode]string
	max   int64 // bound of total (0: none)
	total int64 // bytes of headers and content so far
}

// grow counts n more bytes of the tar and refuses to pass p.max.
func (p *packer) grow(name string, n int64) error {
	p.total += n
	if p.max > 0 && p.total > p.max {
		return fmt.Errorf("/%s: the tree is over sandboxd's maxSourceBytes (%d bytes, daemon.json) and cannot become a runtime", name, p.max)
	}
	return nil
}

// dir packs the members of the open directory dfd, whose name in the tar
// is prefix ("" for the root, else ending in "/").
func (p *packer) dir(dfd int, prefix string) error {
	names, err := readDirNames(dfd)
	if err != nil {
		return fmt.Errorf("reading /%s: %w", prefix, err)
	}
	for _, name := range names {
		if err := p.member(dfd, prefix, name); err != nil {
			return err
		}
	}
	return nil
}

func readDirNames(dfd int) ([]string, error) {
	// A fresh open of "." so that the listing has its own offset.
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), "dir")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

func (p *packer) member(dfd int, prefix, name string) error {
	if err := p.grow(prefix+name, 512); err != nil {
		return err
	}
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil // removed meanwhile
		}
		return fmt.Errorf("opening /%s%s: %w", prefix, name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat /%s%s: %w", prefix, name, err)
	}
	hdr := &tar.Header{
		Name:    prefix + name,
		Mode:    int64(st.Mode & 07777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		if err := p.tw.WriteHeader(hdr); err != nil {
			return err
		}
		sub, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening /%s: %w", hdr.Name, err)
		}
		defer unix.Close(sub)
		return p.dir(sub, hdr.Name)
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return fmt.Errorf("readlink /%s: %w", hdr.Name, err)
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = string(buf[:n])
		return p.tw.WriteHeader(hdr)
	case unix.S_IFREG:
	default:
		return nil // devices, FIFOs, sockets: left out
	}
	if st.Nlink > 1 {
		k := inode{uint64(st.Dev), st.Ino}
		if first, ok := p.seen[k]; ok {
			hdr.Typeflag = tar.TypeLink
			hdr.Linkname = first
			return p.tw.WriteHeader(hdr)
		}
		p.seen[k] = hdr.Name
	}
	if err := p.grow(hdr.Name, (st.Size+511)/512*512); err != nil {
		return err
	}
	// Reopen this very inode for reading: it is a regular file (fstat above).
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("opening /%s: %w", hdr.Name, err)
	}
	src := os.NewFile(uintptr(rfd), hdr.Name)
	defer src.Close()
	hdr.Typeflag = tar.TypeReg
	hdr.Size = st.Size
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(p.tw, io.LimitReader(src, st.Size))
	if err == nil && n != st.Size {
		err = fmt.Errorf("/%s changed size while being packed", hdr.Name)
	}
	return err
}

// resolveMountDests rewrites each mount's destination to the path it
// reaches inside the tree of the open directory rfd: the image's symlinks
// are followed but kept inside the tree (filepath-securejoin, as runc
// resolves mount destinations), so a kubelet volume at
// /var/run/secrets/... lands at /run/secrets/... of an image whose
// /var/run is a link to /run; sandboxd itself follows no symlink in a
// destination. A destination that cannot be resolved is left as given
// (sandboxd then refuses it, naming it).
func resolveMountDests(rfd int, mounts []hostMount) {
	root := "/proc/self/fd/" + strconv.Itoa(rfd)
	for i := range mounts {
		p, err := securejoin.SecureJoin(root, mounts[i].Destination)
		if err != nil || !strings.HasPrefix(p, root+"/") {
			continue
		}
		mounts[i].Destination = p[len(root):]
	}
}
