package main

// run: one command, from fork to its exit line.
//
// While it runs the server sends {"type":"output","stream":"stdout"|"stderr","data":"..."} lines (at most 16 KiB
// each, as read; dropped when the client does not keep up, so a slow client never blocks the command); at the end
// one {"type":"exit",...} line with the exit code or signal, the duration, timed_out, cancelled and the last
// tail_bytes of each stream with their byte totals. A start failure is one {"type":"error","message":...} line.
//
// The end of a command is the shell's exit and both pipes closed. A background child that keeps a pipe open 1 s
// after the shell exited gets its group SIGKILLed. A timeout sends SIGTERM to the group, then SIGKILL 2 s later;
// a {"type":"cancel"} line or a closed connection SIGKILLs the group at once.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	chunkBytes  = 16 * 1024
	liveQueue   = 64 // output lines waiting for the client; more are dropped
	killGrace   = 2 * time.Second
	pipeLinger  = 1 * time.Second
	pipeGiveUp  = 2 * time.Second // after the SIGKILL, how long a pipe held by an escaped process is waited for
	finalWindow = 30 * time.Second
)

type outputLine struct {
	Type   string `json:"type"`
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

type exitLine struct {
	Type        string  `json:"type"`
	ExitCode    *int    `json:"exit_code"`
	Signal      *string `json:"signal"`
	Duration    float64 `json:"duration_seconds"`
	TimedOut    bool    `json:"timed_out"`
	Cancelled   bool    `json:"cancelled"`
	Stdout      string  `json:"stdout"`
	Stderr      string  `json:"stderr"`
	StdoutBytes int64   `json:"stdout_bytes"`
	StderrBytes int64   `json:"stderr_bytes"`
}

func (s *server) run(conn net.Conn, r *bufio.Reader, req request) {
	dir := req.Workdir
	if dir == "" {
		dir = s.workdir
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.workdir, dir)
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		why := "not a directory"
		if err != nil {
			why = errText(err)
		}
		sendError(conn, fmt.Sprintf("workdir %s: %s", dir, why))
		return
	}
	stdout, stderr := newStream("stdout", req.TailBytes), newStream("stderr", req.TailBytes)
	for _, st := range []*stream{stdout, stderr} {
		if st.err != nil {
			sendError(conn, fmt.Sprintf("cannot make a pipe: %v", st.err))
			return
		}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		sendError(conn, fmt.Sprintf("cannot open %s: %v", os.DevNull, err))
		return
	}
	began := time.Now()
	pid, exited, err := s.start(req.Command, dir, []uintptr{devnull.Fd(), stdout.w.Fd(), stderr.w.Fd()})
	devnull.Close()
	stdout.w.Close()
	stderr.w.Close()
	if err != nil {
		stdout.r.Close()
		stderr.r.Close()
		sendError(conn, fmt.Sprintf("cannot start %s in %s: %s", s.shell, dir, errText(err)))
		return
	}
	defer s.forget(pid, exited)
	kill := func(sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }

	// the client's side: a cancel line (true) or the connection's end (false)
	cancel := make(chan bool, 1)
	go func() {
		for {
			line, err := readLine(r, 4096)
			if err != nil {
				cancel <- false
				return
			}
			var msg struct{ Type string }
			if json.Unmarshal(line, &msg) == nil && msg.Type == "cancel" {
				cancel <- true
				return
			}
		}
	}()

	// live output: the readers offer lines, one writer sends them; a full queue drops lines, never waits
	live := make(chan []byte, liveQueue)
	pipesDone := make(chan struct{}, 2)
	go stdout.pump(live, pipesDone)
	go stderr.pump(live, pipesDone)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		broken := false
		for line := range live {
			if !broken {
				_, err := conn.Write(line)
				broken = err != nil
			}
		}
	}()

	var (
		status                    syscall.WaitStatus
		shellDone                 bool
		openPipes                 = 2
		timedOut, cancelled, gone bool
		timeoutC, killC, lingerC  <-chan time.Time
		giveUpC                   <-chan time.Time
	)
	if req.TimeoutSeconds > 0 {
		timer := time.NewTimer(time.Duration(req.TimeoutSeconds * float64(time.Second)))
		defer timer.Stop()
		timeoutC = timer.C
	}
	for !shellDone || openPipes > 0 {
		select {
		case status = <-exited:
			shellDone = true
			if openPipes > 0 {
				lingerC = time.After(pipeLinger)
			}
		case <-pipesDone:
			openPipes--
		case <-timeoutC:
			timedOut = true
			kill(syscall.SIGTERM)
			killC = time.After(killGrace)
		case <-killC:
			kill(syscall.SIGKILL)
			giveUpC = time.After(pipeGiveUp)
		case asked := <-cancel:
			cancelled, gone = true, !asked
			cancel = nil
			kill(syscall.SIGKILL)
			giveUpC = time.After(pipeGiveUp)
		case <-lingerC:
			kill(syscall.SIGKILL)
			giveUpC = time.After(pipeGiveUp)
		case <-giveUpC: // a process outside the group (setsid) holds a pipe: stop reading it
			stdout.r.Close()
			stderr.r.Close()
		}
	}
	close(live)
	_ = conn.SetWriteDeadline(time.Now().Add(finalWindow))
	<-writerDone
	if gone || s.shuttingDown() { // killed by the server's SIGTERM: no result, the connection just closes
		return
	}
	end := exitLine{
		Type: "exit", Duration: time.Since(began).Seconds(), TimedOut: timedOut, Cancelled: cancelled,
		Stdout: stdout.tail.text(), Stderr: stderr.tail.text(), StdoutBytes: stdout.total, StderrBytes: stderr.total,
	}
	if status.Exited() {
		code := status.ExitStatus()
		end.ExitCode = &code
	} else if status.Signaled() {
		name := signalName(status.Signal())
		end.Signal = &name
	}
	_, _ = conn.Write(encodeLine(end))
}

// stream is one of the command's output pipes, its tail and its byte count.
type stream struct {
	name  string
	r, w  *os.File
	err   error
	tail  tail
	total int64
}

func newStream(name string, tailBytes int) *stream {
	r, w, err := os.Pipe()
	return &stream{name: name, r: r, w: w, err: err, tail: tail{limit: tailBytes}}
}

// pump reads the pipe to its end (or its close), keeping the tail and offering each chunk as an output line. A
// multi-byte character cut by a read waits for its rest, so a chunk's text never splits one.
func (st *stream) pump(live chan<- []byte, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	defer st.r.Close()
	buf := make([]byte, chunkBytes)
	kept := 0 // bytes of a cut character at buf[:kept]
	for {
		n, err := st.r.Read(buf[kept:])
		if n > 0 {
			st.tail.add(buf[kept : kept+n])
			st.total += int64(n)
			whole, rest := splitUTF8(buf[:kept+n])
			offer(live, st.name, whole)
			kept = copy(buf, rest)
		}
		if err != nil {
			offer(live, st.name, buf[:kept])
			return
		}
	}
}

func offer(live chan<- []byte, name string, data []byte) {
	if len(data) == 0 || len(live) == cap(live) {
		return
	}
	select {
	case live <- encodeLine(outputLine{Type: "output", Stream: name, Data: string(data)}):
	default:
	}
}

// splitUTF8 splits off an incomplete multi-byte character at the end of b (invalid bytes count as complete).
func splitUTF8(b []byte) (whole, rest []byte) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i], b[i:]
			}
			break
		}
	}
	return b, nil
}

// tail keeps the last limit bytes written to it.
type tail struct {
	limit int
	buf   []byte
}

func (t *tail) add(b []byte) {
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
	}
}

// text is the kept bytes; JSON encoding turns invalid UTF-8 (a character cut at the start) into U+FFFD.
func (t *tail) text() string {
	return string(t.buf[max(0, len(t.buf)-t.limit):])
}

// encodeLine is v as one JSON line (invalid UTF-8 in strings becomes U+FFFD; <, > and & stay as they are).
func encodeLine(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only our own plain structs are encoded
	}
	return b.Bytes()
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

func signalName(sig syscall.Signal) string {
	if name, ok := signalNames[sig]; ok {
		return name
	}
	return fmt.Sprintf("SIG%d", int(sig))
}
