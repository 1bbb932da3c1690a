package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// serveMain starts `segpipe serve` on a free loopback port, waits until it
// listens, streams --batches batches of one shard set over Arrow Flight,
// stops the server with SIGTERM and records the server's own CPU time and
// peak RSS. The server opens the shard set on the first request, so the
// request-to-first-batch time includes opening the set.
func serveMain(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	out := fs.String("out", "", "write the step record to `FILE`")
	step := fs.String("step", "serve", "step `NAME`")
	bin := fs.String("bin", "segpipe", "segpipe `BINARY`")
	root := fs.String("root", "", "shard root `DIR` given to serve --shards")
	set := fs.String("set", "", "shard set below the root")
	n := fs.Int64("n", 0, "images in the set")
	bs := fs.Int("batch", 32, "images per batch")
	imgsz := fs.Int("imgsz", 128, "output image side")
	nb := fs.Int64("batches", 20, "batches to stream")
	consume := fs.Int64("consume", 0, "resume state: samples of the epoch already consumed")
	cache := fs.String("cache", "", "serve --cache `SIZE` (empty: serve's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *root == "" {
		return errors.New("serve: want --out FILE --root DIR [--set NAME]")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()

	argv := []string{*bin, "serve", "--shards", *root, "--addr", addr}
	if *cache != "" {
		argv = append(argv, "--cache", *cache)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ready := make(chan struct{})
	var logTail []string
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			line := sc.Text()
			logTail = append(logTail[max(0, len(logTail)-19):], line)
			if !once && strings.Contains(line, "segpipe serve: grpc://") {
				once = true
				close(ready)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	select {
	case <-ready:
	case err := <-exited:
		return fmt.Errorf("serve: the server exited before listening: %v\n%s", err, strings.Join(logTail, "\n"))
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return errors.New("serve: the server did not listen within 60 s")
	}
	listening := time.Since(t0)

	figures, cerr := stream(addr, remote.Request{Shards: *set, BatchSize: *bs, ImgSz: *imgsz,
		Start: order.State{Seed: 1, Consumed: *consume}, Limit: *nb})
	cmd.Process.Signal(syscall.SIGTERM)
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		werr = <-exited
	}
	if cerr != nil {
		return fmt.Errorf("serve: client: %w\n%s", cerr, strings.Join(logTail, "\n"))
	}
	if werr != nil && !isSignal(werr) {
		return fmt.Errorf("serve: server: %w\n%s", werr, strings.Join(logTail, "\n"))
	}
	cpu, rss := rusageOf(cmd.ProcessState)
	figures["listen_s"] = listening.Seconds()
	figures["first_batch_since_start_s"] = listening.Seconds() + figures["first_batch_since_request_s"]
	fmt.Fprintf(os.Stderr, "scalegen serve: listening after %.2fs, first batch %.2fs after the request, %g batches\n",
		listening.Seconds(), figures["first_batch_since_request_s"], figures["batches"])
	return writeStep(*out, &Step{Step: *step, N: *n, WallS: time.Since(t0).Seconds(), CPUS: cpu, MaxRSSBytes: rss,
		Extra: figures, Command: argv})
}

func isSignal(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return true
		}
	}
	return false
}

// stream reads req's batches from addr and times them.
func stream(addr string, req remote.Request) (map[string]float64, error) {
	c, err := remote.NewClient(remote.ClientConfig{Addr: addr})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := c.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var first time.Duration
	var batches, images int64
	for {
		rec, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if batches == 0 {
			first = time.Since(t0)
		}
		batches++
		images += rec.NumRows()
		rec.Release()
	}
	if batches == 0 {
		return nil, errors.New("no batch came")
	}
	return map[string]float64{
		"first_batch_since_request_s": first.Seconds(),
		"stream_s":                    time.Since(t0).Seconds(),
		"batches":                     float64(batches),
		"images":                      float64(images),
	}, nil
}
