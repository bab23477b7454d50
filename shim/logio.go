package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/fifo"
)

// checkOutputURI says whether Start can open `uri`, a process's stdout or
// stderr as containerd names it (`field` names it in the error): "" (none),
// a FIFO's path, fifo://PATH or file://PATH (ctr run --log-uri file://...).
// binary:// (a logging program fed by pipes) is refused, as is any other
// scheme, so that a task whose output has nowhere to go is never created.
func checkOutputURI(field, uri string) error {
	_, _, err := parseOutputURI(field, uri)
	return err
}

func parseOutputURI(field, uri string) (kind, path string, err error) {
	if uri == "" {
		return "", "", nil
	}
	u, perr := url.Parse(uri)
	if perr != nil || u.Scheme == "" {
		return "fifo", uri, nil // a plain path: containerd's FIFO
	}
	switch u.Scheme {
	case "fifo", "file":
		if !filepath.IsAbs(u.Path) || u.Host != "" {
			return "", "", fmt.Errorf("%s: %q: a %s:// URI needs an absolute path (%s:///PATH): %w",
				field, uri, u.Scheme, u.Scheme, errdefs.ErrInvalidArgument)
		}
		return u.Scheme, u.Path, nil
	case "binary":
		return "", "", fmt.Errorf("%s: %q: binary:// log URIs are not supported by io.containerd.sandboxd.v2 (use a FIFO or file://): %w",
			field, uri, errdefs.ErrNotImplemented)
	}
	return "", "", fmt.Errorf("%s: %q: unknown URI scheme %q (a FIFO path, fifo:// or file://): %w",
		field, uri, u.Scheme, errdefs.ErrInvalidArgument)
}

// openOutput opens a process's stdout or stderr (checkOutputURI): a FIFO
// for writing (waiting for its reader, as containerd's shims do), or a
// file:// path appended to, created 0600 (its directory 0700) if missing.
// Nil without a URI. The caller closes it.
func openOutput(field, uri string) (io.WriteCloser, error) {
	kind, path, err := parseOutputURI(field, uri)
	if err != nil || kind == "" {
		return nil, err
	}
	if kind == "fifo" {
		return fifo.OpenFifo(context.Background(), path, syscall.O_WRONLY, 0)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0700); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_CLOEXEC, 0600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return fileOutput{f}, nil
}

// fileOutput is a file:// output. It hides the file's fd from waitDrained:
// a regular file has no reader to wait for (and FIONREAD on it counts the
// bytes past its offset, which the other stream's appends make non-zero).
type fileOutput struct{ f *os.File }

func (o fileOutput) Write(b []byte) (int, error) { return o.f.Write(b) }
func (o fileOutput) Close() error                { return o.f.Close() }
