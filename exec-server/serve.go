package main

// serve: the self-check, the socket, SIGTERM, the reaper of children and one goroutine per connection.
//
// Files next to the socket: `ready` (written once listening) or `failed` (the one-line reason the self-check or the
// listen failed; then the exit code is 3). The same line goes to stderr and, when it is writable, to
// /dev/termination-log, so Kubernetes shows it as the container's termination message.

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	maxRequestBytes  = 1 << 20 // the request line, command included
	requestTimeout   = 30 * time.Second
	defaultTailBytes = 16 * 1024
	maxTailBytes     = 1 << 20
)

// request is the client's first line.
type request struct {
	Command        string  `json:"command"`
	Workdir        string  `json:"workdir"`
	TimeoutSeconds float64 `json:"timeout_seconds"` // <= 0: no timeout
	TailBytes      int     `json:"tail_bytes"`
}

type server struct {
	shell   string
	workdir string

	mu       sync.Mutex
	running  map[int]chan syscall.WaitStatus // process group id (= the shell's pid) -> where its exit status goes
	stopping bool
}

func serve(args []string) int {
	flags := flag.NewFlagSet("serve", flag.ContinueOnError)
	socket := flags.String("socket", "", "the unix socket to listen on")
	workdir := flags.String("workdir", "/workspace", "the default working directory of commands")
	shell := flags.String("shell", "/bin/sh", "") // not in the usage: tests point it at an unusable file
	// not in the usage: how long a SIGTERMed server waits between killing the commands and exiting (tests hold the
	// window in which a killed command's end could be reported open with it; the commands' clients must see the
	// server go away, never a "killed by SIGKILL" result).
	stopGrace := flags.Duration("stop-grace", 0, "")
	flags.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	if err := flags.Parse(args); err != nil || *socket == "" || flags.NArg() != 0 {
		if err == nil {
			fmt.Fprint(os.Stderr, usage)
		}
		return 2
	}
	dir := filepath.Dir(*socket)
	_ = os.Remove(filepath.Join(dir, "ready")) // a restarted server says again what it is
	_ = os.Remove(filepath.Join(dir, "failed"))
	if reason := selfCheck(*shell, *workdir); reason != "" {
		return fail(dir, reason)
	}
	_ = os.Remove(*socket) // stale, from a server before this one
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", *socket)
	syscall.Umask(old)
	if err != nil {
		return fail(dir, fmt.Sprintf("exec server cannot listen on %s: %s", *socket, errText(err)))
	}
	_ = os.Chmod(*socket, 0o600)

	s := &server{shell: *shell, workdir: *workdir, running: map[int]chan syscall.WaitStatus{}}
	s.startReaper()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-stop
		n := s.killAll()
		fmt.Fprintf(os.Stderr, "unicore-exec: %v: killed %d running command(s)\n", sig, n)
		time.Sleep(*stopGrace)
		_ = os.Remove(*socket)
		_ = os.Remove(filepath.Join(dir, "ready"))
		os.Exit(0)
	}()
	if err := writeAtomic(filepath.Join(dir, "ready"), fmt.Sprintf("%d\n", os.Getpid())); err != nil {
		fmt.Fprintf(os.Stderr, "unicore-exec: writing the ready file: %v\n", err)
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "unicore-exec: accept: %v\n", err)
			time.Sleep(100 * time.Millisecond) // out of file descriptors, say: let running commands end some
			continue
		}
		go s.handle(conn)
	}
}

// selfCheck runs `<shell> -c 'exit 0'` in workdir the way commands will run; "" when it works, else the reason.
func selfCheck(shell, workdir string) string {
	who := fmt.Sprintf("uid %d (non-root)", os.Getuid())
	if os.Getuid() == 0 {
		who = "uid 0 (root)"
	}
	if info, err := os.Stat(workdir); err != nil {
		return fmt.Sprintf("workbench workdir %s is not usable as %s: %s", workdir, who, errText(err))
	} else if !info.IsDir() {
		return fmt.Sprintf("workbench workdir %s is not a directory", workdir)
	}
	if err := syscall.Access(workdir, 1); err != nil { // X_OK: may enter it
		return fmt.Sprintf("workbench workdir %s is not usable as %s: %s", workdir, who, errText(err))
	}
	cmd := exec.Command(shell, "-c", "exit 0")
	cmd.Dir = workdir
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &exitErr):
		said := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		if said != "" {
			said = ": " + said
		}
		return fmt.Sprintf("workbench image's %s -c 'exit 0' failed as %s (%s)%s", shell, who, exitErr.ProcessState, said)
	default:
		return fmt.Sprintf("workbench image cannot run %s as %s: %s", shell, who, errText(err))
	}
}

// fail says reason on one line to stderr, /dev/termination-log (if writable; never created) and <dir>/failed.
func fail(dir, reason string) int {
	line := strings.Join(strings.Fields(reason), " ") + "\n"
	fmt.Fprint(os.Stderr, line)
	if f, err := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0); err == nil {
		_, _ = f.WriteString(line)
		_ = f.Close()
	}
	if err := writeAtomic(filepath.Join(dir, "failed"), line); err != nil {
		fmt.Fprintf(os.Stderr, "unicore-exec: writing the failed file: %v\n", err)
	}
	return 3
}

// errText is the innermost system error's text ("permission denied"), else the error's own.
func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

func writeAtomic(path, text string) error {
	tmp := fmt.Sprintf("%s.tmp%d", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// startReaper reaps every child: the commands' shells (their status goes to run) and, when the server is a
// container's pid 1, the orphans reparented to it (a killed command's background children), so no zombie stays.
// Every wait of the server goes through here: run never waits on its own.
func (s *server) startReaper() {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go func() {
		for range sigchld {
			for {
				var status syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
				s.mu.Lock() // start holds it from fork to registration, so a shell's pid is always known here
				if ch, ok := s.running[pid]; ok {
					ch <- status // buffered 1: one exit per pid
				}
				s.mu.Unlock()
			}
		}
	}()
}

// start forks `<shell> -c command` in its own process group and registers it; the group id is the pid.
func (s *server) start(command, dir string, files []uintptr) (int, chan syscall.WaitStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return 0, nil, errors.New("the exec server is stopping")
	}
	pid, err := syscall.ForkExec(s.shell, []string{s.shell, "-c", command}, &syscall.ProcAttr{
		Dir: dir, Env: os.Environ(), Files: files, Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, nil, err
	}
	exited := make(chan syscall.WaitStatus, 1)
	s.running[pid] = exited
	return pid, exited, nil
}

func (s *server) forget(pid int, exited chan syscall.WaitStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[pid] == exited {
		delete(s.running, pid)
	}
}

// killAll SIGKILLs every running command's process group and refuses new ones.
func (s *server) killAll() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for pid := range s.running {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	return len(s.running)
}

// shuttingDown: SIGTERM killed every command; their ends are not reported (their clients see the server go away).
func (s *server) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// handle reads one request and runs it; every answer is a JSON line.
func (s *server) handle(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	r := bufio.NewReader(conn)
	line, err := readLine(r, maxRequestBytes)
	if err != nil {
		if !errors.Is(err, io.EOF) || len(line) > 0 {
			sendError(conn, fmt.Sprintf("reading the request: %v", err))
		}
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		sendError(conn, fmt.Sprintf("the request is not valid JSON: %v", err))
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		sendError(conn, "the request has no command")
		return
	}
	if req.TailBytes <= 0 {
		req.TailBytes = defaultTailBytes
	}
	req.TailBytes = min(req.TailBytes, maxTailBytes)
	s.run(conn, r, req)
}

// readLine reads up to '\n' (not included); a longer line than max is an error.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > max {
			return nil, fmt.Errorf("a line of over %d bytes", max)
		}
		if err == nil {
			return line[:len(line)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func sendError(conn net.Conn, message string) {
	_ = conn.SetWriteDeadline(time.Now().Add(requestTimeout))
	_, _ = conn.Write(encodeLine(map[string]string{"type": "error", "message": message}))
}
