//go:build cgo

package main

/*
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include "segpipe.h"

// The process that loaded the library, whose Go runtime is the library's.
// A child made by fork inherits the library's memory and the exported
// structs' callbacks but not the runtime's threads: a call into Go there
// waits forever for threads that do not exist. Python's interpreter frees
// objects at exit and on collection, so an inherited batch or stream would
// call its release callback in the child; these guards make every
// callback the library hands out a C function that returns at once in a
// child, leaking what it would release (the child's memory goes with it,
// as os._exit would leave it).
static pid_t segpipe_owner;
__attribute__((constructor)) static void segpipe_owner_init(void) { segpipe_owner = getpid(); }
static int segpipe_forked(void) { return getpid() != segpipe_owner; }

static const char segpipe_forked_msg[] =
	"segpipe: this process is a fork of the one that loaded the loader library; its Go runtime cannot run here "
	"(use num_workers=0 with a DataLoader, or the 'spawn' start method)";

// A guarded array keeps the producer's callback and private data here,
// reached through private_data so that the struct may be moved (the
// Arrow C data interface allows it).
typedef struct {
	void (*release)(struct ArrowArray *);
	void *private_data;
} segpipe_guard_array;

static void segpipe_array_release(struct ArrowArray *a) {
	segpipe_guard_array *g = (segpipe_guard_array *)a->private_data;
	if (segpipe_forked()) {
		a->release = NULL;
		return;
	}
	a->release = g->release;
	a->private_data = g->private_data;
	free(g);
	a->release(a);
}

// Every level is guarded: a consumer may move a child out and release it
// on its own.
static void segpipe_guard_array_tree(struct ArrowArray *a) {
	for (int64_t i = 0; i < a->n_children; i++) {
		if (a->children[i] != NULL && a->children[i]->release != NULL) {
			segpipe_guard_array_tree(a->children[i]);
		}
	}
	if (a->dictionary != NULL && a->dictionary->release != NULL) {
		segpipe_guard_array_tree(a->dictionary);
	}
	segpipe_guard_array *g = (segpipe_guard_array *)malloc(sizeof *g);
	if (g == NULL) {
		return; // unguarded: still right in this process
	}
	g->release = a->release;
	g->private_data = a->private_data;
	a->release = segpipe_array_release;
	a->private_data = g;
}

typedef struct {
	struct ArrowArrayStream inner;
} segpipe_guard_stream;

static int segpipe_stream_schema(struct ArrowArrayStream *s, struct ArrowSchema *out) {
	if (segpipe_forked()) {
		return ECHILD;
	}
	segpipe_guard_stream *g = (segpipe_guard_stream *)s->private_data;
	return g->inner.get_schema(&g->inner, out);
}

static int segpipe_stream_next(struct ArrowArrayStream *s, struct ArrowArray *out) {
	if (segpipe_forked()) {
		return ECHILD;
	}
	segpipe_guard_stream *g = (segpipe_guard_stream *)s->private_data;
	int rc = g->inner.get_next(&g->inner, out);
	if (rc == 0 && out->release != NULL) {
		segpipe_guard_array_tree(out);
	}
	return rc;
}

static const char *segpipe_stream_error(struct ArrowArrayStream *s) {
	if (segpipe_forked()) {
		return segpipe_forked_msg;
	}
	segpipe_guard_stream *g = (segpipe_guard_stream *)s->private_data;
	return g->inner.get_last_error(&g->inner);
}

static void segpipe_stream_release(struct ArrowArrayStream *s) {
	segpipe_guard_stream *g = (segpipe_guard_stream *)s->private_data;
	s->release = NULL;
	if (segpipe_forked()) {
		return;
	}
	g->inner.release(&g->inner);
	free(g);
}

// segpipe_guard moves s's callbacks behind the guards; when it cannot,
// it releases s and returns nonzero.
static int segpipe_guard(struct ArrowArrayStream *s) {
	segpipe_guard_stream *g = (segpipe_guard_stream *)malloc(sizeof *g);
	if (g == NULL) {
		s->release(s);
		return ENOMEM;
	}
	g->inner = *s;
	s->get_schema = segpipe_stream_schema;
	s->get_next = segpipe_stream_next;
	s->get_last_error = segpipe_stream_error;
	s->release = segpipe_stream_release;
	s->private_data = g;
	return 0;
}

// The owner as the tests set it, to act as a forked child (owner 0
// matches no process) and back.
static void segpipe_fork_test_set_owner(pid_t pid) { segpipe_owner = pid; }
static pid_t segpipe_fork_test_owner(void) { return segpipe_owner; }
*/
import "C"

import (
	"errors"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/cdata"
)

// guardStream puts the fork guards (above) in front of an exported
// stream's callbacks and, through get_next, of every array it hands out;
// on failure the stream is released.
func guardStream(s *cdata.CArrowArrayStream) error {
	if C.segpipe_guard((*C.struct_ArrowArrayStream)(unsafe.Pointer(s))) != 0 {
		return errors.New("segpipe: out of memory guarding the stream")
	}
	return nil
}

// actAsFork makes the guards behave as in a forked child (on) or as in
// the owner (off), for the tests; it returns the previous owner.
func actAsFork(on bool) func() {
	prev := C.segpipe_fork_test_owner()
	if on {
		C.segpipe_fork_test_set_owner(0)
	} else {
		C.segpipe_fork_test_set_owner(C.pid_t(C.getpid()))
	}
	return func() { C.segpipe_fork_test_set_owner(prev) }
}
