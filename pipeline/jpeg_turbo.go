//go:build turbojpeg && cgo

package pipeline

/*
#cgo LDFLAGS: -lturbojpeg
#include <stdio.h>
#include <stdlib.h>
#include <turbojpeg.h>

// decode decompresses src into dst (w*h*3 RGB bytes) or reports why not.
// Warnings (a truncated or corrupt stream that still produced pixels) are
// errors too: the loader skips such images like the stdlib path does.
static int segpipe_tj_header(const unsigned char *src, unsigned long n, int *w, int *h, char *msg, int msglen) {
	tjhandle t = tjInitDecompress();
	if (!t) { snprintf(msg, msglen, "%s", tjGetErrorStr2(NULL)); return -1; }
	int ss, cs;
	int rc = tjDecompressHeader3(t, src, n, w, h, &ss, &cs);
	if (rc != 0) snprintf(msg, msglen, "%s", tjGetErrorStr2(t));
	tjDestroy(t);
	return rc;
}

static int segpipe_tj_decode(const unsigned char *src, unsigned long n, unsigned char *dst, int w, int h, char *msg, int msglen) {
	tjhandle t = tjInitDecompress();
	if (!t) { snprintf(msg, msglen, "%s", tjGetErrorStr2(NULL)); return -1; }
	int rc = tjDecompress2(t, src, n, dst, w, 0, h, TJPF_RGB, TJFLAG_NOREALLOC);
	if (rc != 0) snprintf(msg, msglen, "%s", tjGetErrorStr2(t));
	tjDestroy(t);
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// JPEGDecoder names the JPEG implementation of this build.
const JPEGDecoder = "libjpeg-turbo (cgo, turbojpeg build tag)"

// decodeJPEG decodes with libjpeg-turbo straight into buf (RGB), so a
// decode allocates nothing on the Go heap when buf is large enough.
func decodeJPEG(data, buf []byte) (augment.Image, error) {
	if len(data) == 0 {
		return augment.Image{}, errors.New("no image bytes")
	}
	var msg [256]C.char
	var w, h C.int
	src := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	if C.segpipe_tj_header(src, C.ulong(len(data)), &w, &h, &msg[0], C.int(len(msg))) != 0 {
		return augment.Image{}, fmt.Errorf("jpeg: %s", C.GoString(&msg[0]))
	}
	if w <= 0 || h <= 0 || int64(w)*int64(h) > 1<<28 {
		return augment.Image{}, fmt.Errorf("jpeg: unusable size %dx%d", w, h)
	}
	n := 3 * int(w) * int(h)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	pix := buf[:n]
	if C.segpipe_tj_decode(src, C.ulong(len(data)), (*C.uchar)(unsafe.Pointer(unsafe.SliceData(pix))), w, h, &msg[0], C.int(len(msg))) != 0 {
		return augment.Image{}, fmt.Errorf("jpeg: %s", C.GoString(&msg[0]))
	}
	return augment.Image{W: int(w), H: int(h), Pix: pix}, nil
}
