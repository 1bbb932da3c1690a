//go:build turbojpeg && cgo

package pipeline

/*
#cgo LDFLAGS: -lturbojpeg
#include <stdio.h>
#include <stdlib.h>
#include <turbojpeg.h>

static tjhandle segpipe_tj_new(char *msg, int msglen) {
	tjhandle t = tjInitDecompress();
	if (!t) snprintf(msg, msglen, "%s", tjGetErrorStr2(NULL));
	return t;
}

static int segpipe_tj_header(tjhandle t, const unsigned char *src, unsigned long n, int *w, int *h, char *msg, int msglen) {
	int ss, cs;
	int rc = tjDecompressHeader3(t, src, n, w, h, &ss, &cs);
	if (rc != 0) snprintf(msg, msglen, "%s", tjGetErrorStr2(t));
	return rc;
}

// Warnings (a truncated or corrupt stream that still produced pixels) are
// errors too: the loader skips such images like the stdlib path does.
static int segpipe_tj_decode(tjhandle t, const unsigned char *src, unsigned long n, unsigned char *dst, int w, int h, char *msg, int msglen) {
	int rc = tjDecompress2(t, src, n, dst, w, 0, h, TJPF_RGB, TJFLAG_NOREALLOC);
	if (rc != 0) snprintf(msg, msglen, "%s", tjGetErrorStr2(t));
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// JPEGDecoder names the JPEG implementation of this build.
const JPEGDecoder = "libjpeg-turbo (cgo, turbojpeg build tag)"

// tjHandles keeps decompressor handles for reuse: creating one allocates
// and initialises libjpeg's state, which cost more than reading a header.
// At most one handle per concurrent decode exists; a few are kept when
// decodes finish (the cap bounds memory if many goroutines once decoded at
// the same time). A handle that reported an error is destroyed, not
// reused: after a corrupt stream its state can fail the next good image
// (the corrupt-image test caught exactly that).
var tjHandles struct {
	mu   sync.Mutex
	free []C.tjhandle
}

const maxIdleTJHandles = 32

func getTJHandle() (C.tjhandle, error) {
	tjHandles.mu.Lock()
	if n := len(tjHandles.free); n > 0 {
		h := tjHandles.free[n-1]
		tjHandles.free = tjHandles.free[:n-1]
		tjHandles.mu.Unlock()
		return h, nil
	}
	tjHandles.mu.Unlock()
	var msg [256]C.char
	h := C.segpipe_tj_new(&msg[0], C.int(len(msg)))
	if h == nil {
		return nil, fmt.Errorf("jpeg: %s", C.GoString(&msg[0]))
	}
	return h, nil
}

func putTJHandle(h C.tjhandle) {
	tjHandles.mu.Lock()
	if len(tjHandles.free) < maxIdleTJHandles {
		tjHandles.free = append(tjHandles.free, h)
		h = nil
	}
	tjHandles.mu.Unlock()
	if h != nil {
		C.tjDestroy(h)
	}
}

// decodeJPEG decodes with libjpeg-turbo straight into buf (RGB), so a
// decode allocates nothing on the Go heap when buf is large enough.
func decodeJPEG(data, buf []byte) (augment.Image, error) {
	if len(data) == 0 {
		return augment.Image{}, errors.New("no image bytes")
	}
	t, err := getTJHandle()
	if err != nil {
		return augment.Image{}, err
	}
	var msg [256]C.char
	var w, h C.int
	src := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	if C.segpipe_tj_header(t, src, C.ulong(len(data)), &w, &h, &msg[0], C.int(len(msg))) != 0 {
		C.tjDestroy(t)
		return augment.Image{}, fmt.Errorf("jpeg: %s", C.GoString(&msg[0]))
	}
	if w <= 0 || h <= 0 || int64(w)*int64(h) > 1<<28 {
		putTJHandle(t)
		return augment.Image{}, fmt.Errorf("jpeg: unusable size %dx%d", w, h)
	}
	n := 3 * int(w) * int(h)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	pix := buf[:n]
	if C.segpipe_tj_decode(t, src, C.ulong(len(data)), (*C.uchar)(unsafe.Pointer(unsafe.SliceData(pix))), w, h, &msg[0], C.int(len(msg))) != 0 {
		C.tjDestroy(t)
		return augment.Image{}, fmt.Errorf("jpeg: %s", C.GoString(&msg[0]))
	}
	putTJHandle(t)
	return augment.Image{W: int(w), H: int(h), Pix: pix}, nil
}
