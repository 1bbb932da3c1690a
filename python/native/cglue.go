//go:build cgo

package main

/*
#include <stdlib.h>
#include "segpipe.h"

typedef const char cchar; // as in exports.go
*/
import "C"

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/cdata"
)

// Go entry points to the exported C functions, with Go types, for the
// tests (a _test.go file cannot use cgo): each passes its arguments as C
// memory, as a C caller would, and returns what the caller would read.

// callOpen calls segpipe_open; a nil string passes NULL. It returns the
// handle and errbuf's text (an errcap-byte buffer).
func callOpen(request, options *string, out *cdata.CArrowArrayStream, errcap int) (int64, string) {
	cstr := func(s *string) *C.char {
		if s == nil {
			return nil
		}
		return C.CString(*s)
	}
	req, opts := cstr(request), cstr(options)
	defer C.free(unsafe.Pointer(req))
	defer C.free(unsafe.Pointer(opts))
	buf := (*C.char)(C.calloc(C.size_t(errcap)+1, 1))
	defer C.free(unsafe.Pointer(buf))
	h := segpipe_open((*C.cchar)(req), (*C.cchar)(opts), (*C.struct_ArrowArrayStream)(unsafe.Pointer(out)), buf, C.size_t(errcap))
	return int64(h), C.GoString(buf)
}

// callText calls segpipe_state (summary false) or segpipe_summary with a
// buffer of capacity bytes; it returns the result and the buffer's text.
func callText(h int64, summary bool, capacity int) (int, string) {
	buf := (*C.char)(C.calloc(C.size_t(capacity)+1, 1))
	defer C.free(unsafe.Pointer(buf))
	var n C.int
	if summary {
		n = segpipe_summary(C.int64_t(h), buf, C.size_t(capacity))
	} else {
		n = segpipe_state(C.int64_t(h), buf, C.size_t(capacity))
	}
	return int(n), C.GoString(buf)
}

// callClose calls segpipe_close.
func callClose(h int64) { segpipe_close(C.int64_t(h)) }

// callVersion calls segpipe_version.
func callVersion() string { return C.GoString(segpipe_version()) }

// exported reports whether s holds a stream (its release callback is set).
func exported(s *cdata.CArrowArrayStream) bool {
	return (*C.struct_ArrowArrayStream)(unsafe.Pointer(s)).release != nil
}
