// Command check_tickets holds the ticket checks of the Python package
// (python/segpipe/request.py) against the server's parser: it reads JSON
// lines {"ticket": "...", "ok": bool, "why": "..."} written by
// python/tests/tickets.py and fails when remote.ParseRequest accepts a
// ticket Python refuses or refuses one Python accepts.
//
//	python3 python/tests/tickets.py | go run ./python/tests/check_tickets
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/segpipe/segpipe/pipeline/remote"
)

type verdict struct {
	Ticket string `json:"ticket"`
	OK     bool   `json:"ok"`
	Why    string `json:"why"`
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n, bad := 0, 0
	for sc.Scan() {
		var v verdict
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			fmt.Fprintf(os.Stderr, "check_tickets: line %d: %v\n", n+1, err)
			os.Exit(2)
		}
		n++
		_, err := remote.ParseRequest([]byte(v.Ticket))
		switch {
		case v.OK && err != nil:
			bad++
			fmt.Printf("Python accepts, the server refuses (%v): %s\n", err, v.Ticket)
		case !v.OK && err == nil:
			bad++
			fmt.Printf("Python refuses (%s), the server accepts: %s\n", v.Why, v.Ticket)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "check_tickets:", err)
		os.Exit(2)
	}
	if n == 0 {
		fmt.Fprintln(os.Stderr, "check_tickets: no tickets on stdin")
		os.Exit(2)
	}
	fmt.Printf("%d tickets: %d agree, %d disagree\n", n, n-bad, bad)
	if bad > 0 {
		os.Exit(1)
	}
}
