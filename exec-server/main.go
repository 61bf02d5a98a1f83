// Command unicore-exec is the workbench container's exec server: the turn container asks it, over a unix socket,
// to run shell commands in the workbench (the task's own image), which needs nothing of UniCore inside.
//
//	unicore-exec install <dest>                           copy this binary to <dest> (the init container's job)
//	unicore-exec serve --socket PATH [--workdir DIR]      self-check, then serve one command per connection
//
// The protocol (newline-delimited JSON, one connection = one command) is described in serve.go and run.go; the
// Python client is core/unicore/commands/exec_client.py. Standard library only; built static (CGO_ENABLED=0) by
// hack/build-exec-server.sh, and into the agent image (Dockerfile.agent) at /usr/local/bin/unicore-exec.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

const usage = `usage:
  unicore-exec install <dest>
  unicore-exec serve --socket PATH [--workdir DIR]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "install":
		if len(os.Args) != 3 {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "unicore-exec install: %v\n", err)
			os.Exit(1)
		}
	case "serve":
		os.Exit(serve(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "unicore-exec: unknown subcommand %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

// install copies this executable to dest (mode 0755) under a temporary name, then renames it, so a reader never
// sees half a binary.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
