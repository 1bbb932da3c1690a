//go:build cgo

package main

/*
#include <stdlib.h>
#include <string.h>
#include "segpipe.h"

// cchar keeps cgo's prototypes of the exports const-correct, so that they
// agree with segpipe.h's.
typedef const char cchar;
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/cdata"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"
)

// main is required by -buildmode=c-shared and never runs.
func main() {}

// version is the segpipe version segpipe_version reports; the build sets
// it with -ldflags "-X main.version=..." as for the CLI (cli.Version).
var version = "0.1.0-dev"

// cVersion is version as a C string, made once and never freed.
var cVersion = C.CString(version)

// cmem is the C allocator every exported buffer comes from.
var cmem = mallocator.NewMallocator()

// goBytes copies a C string (NULL: empty).
func goBytes(s *C.cchar) []byte {
	if s == nil {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(s), C.int(C.strlen(s)))
}

// cBuffer views a caller's buffer of n bytes (nil when there is none).
func cBuffer(p *C.char, n C.size_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n))
}

//export segpipe_open
func segpipe_open(request_json, options_json *C.cchar, out *C.struct_ArrowArrayStream, errbuf *C.char, errcap C.size_t) (h C.int64_t) {
	defer func() {
		if p := recover(); p != nil {
			fill(cBuffer(errbuf, errcap), []byte(panicError(p).Error()))
			h = 0
		}
	}()
	if request_json == nil {
		fill(cBuffer(errbuf, errcap), []byte("segpipe: no request (request_json is NULL)"))
		return 0
	}
	id, err := openHandle(goBytes(request_json), goBytes(options_json), (*cdata.CArrowArrayStream)(unsafe.Pointer(out)), cmem)
	if err != nil {
		fill(cBuffer(errbuf, errcap), []byte(err.Error()))
		return 0
	}
	return C.int64_t(id)
}

//export segpipe_state
func segpipe_state(h C.int64_t, buf *C.char, capacity C.size_t) C.int {
	return writeJSON(h, buf, capacity, func(s *session) []byte { return s.stateJSON() })
}

//export segpipe_summary
func segpipe_summary(h C.int64_t, buf *C.char, capacity C.size_t) C.int {
	return writeJSON(h, buf, capacity, func(s *session) []byte {
		b, err := s.summaryJSON()
		if err != nil {
			b = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
		}
		return b
	})
}

// writeJSON fills buf with what text makes of handle h's session and
// returns its length (segpipe.h), or -1 for a handle that is not open or
// a panic, writing nothing then.
func writeJSON(h C.int64_t, buf *C.char, capacity C.size_t, text func(*session) []byte) (n C.int) {
	defer func() {
		if p := recover(); p != nil {
			n = -1
		}
	}()
	s := lookup(int64(h))
	if s == nil {
		return -1
	}
	return C.int(fill(cBuffer(buf, capacity), text(s)))
}

//export segpipe_close
func segpipe_close(h C.int64_t) {
	defer func() { _ = recover() }()
	closeHandle(int64(h))
}

//export segpipe_version
func segpipe_version() *C.cchar { return cVersion }

// newCStream returns a zeroed ArrowArrayStream in C memory, for callers in
// Go (the tests) that stand where a C caller would; free it with
// freeCStream after releasing it.
func newCStream() *cdata.CArrowArrayStream {
	return (*cdata.CArrowArrayStream)(C.calloc(1, C.sizeof_struct_ArrowArrayStream))
}

// freeCStream frees a stream newCStream made.
func freeCStream(s *cdata.CArrowArrayStream) { C.free(unsafe.Pointer(s)) }
