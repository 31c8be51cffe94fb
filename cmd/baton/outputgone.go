package main

import (
	"errors"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// watchOutput calls gone, once, when w (baton's standard output) is a pipe
// or a socket whose reader has gone, such as head's in
// `baton elect --observe | head -1`. A command that writes only now and
// then (a change of leader may be days away) would otherwise learn it only
// at its next write. stop ends the watch and returns once it has ended;
// for anything else (a terminal, a file, a buffer in tests) there is
// nothing to watch.
//
// The kernel marks the write end of a pipe whose readers are all gone with
// POLLERR, and a socket whose peer has gone with POLLHUP: a poll that asks
// for no event still reports those. It polls a duplicate of the descriptor
// beside a pipe of its own, which stop closes to wake it.
func watchOutput(w io.Writer, gone func()) (stop func()) {
	if o, ok := w.(outputWriter); ok {
		w = o.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	fd, err := dupIfPipe(f)
	if err != nil {
		return func() {}
	}
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC); err != nil {
		_ = unix.Close(fd)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		defer unix.Close(wake[0])
		fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || fds[1].Revents != 0 {
				return // stopped, or nothing more to learn
			}
			if fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				gone()
			}
			if fds[0].Revents != 0 {
				return // gone, or POLLNVAL: nothing more to learn
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { _ = unix.Close(wake[1]) })
		<-done
	}
}

// dupIfPipe returns a duplicate of f's descriptor when f is a pipe or a
// socket, and an error otherwise.
func dupIfPipe(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var ferr error
	if err := rc.Control(func(raw uintptr) {
		var st unix.Stat_t
		if ferr = unix.Fstat(int(raw), &st); ferr != nil {
			return
		}
		if st.Mode&unix.S_IFMT != unix.S_IFIFO && st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			ferr = errors.New("not a pipe or a socket")
			return
		}
		fd, ferr = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	return fd, ferr
}
