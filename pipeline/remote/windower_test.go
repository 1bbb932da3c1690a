package remote

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
)

// The server windows its records through its plan (plan.go, one schema
// per stream); the tests window records whose dense form they know, to
// check the expander against it, with this holder of the same two calls.

// windowedSchema derives the windowed schema from a batch schema.
func windowedSchema(dense *arrow.Schema, hp, wp int) *arrow.Schema {
	return batch.WindowedSchema(dense, hp, wp)
}

// windower converts dense batch records into windowed ones. Not safe for
// concurrent use: one per stream.
type windower struct {
	mem    memory.Allocator
	schema *arrow.Schema
}

func newWindower(dense *arrow.Schema, hp, wp int, mem memory.Allocator) *windower {
	return &windower{mem: mem, schema: windowedSchema(dense, hp, wp)}
}

// encode returns the windowed form of rec (batch.Windowed); the caller
// still owns rec and owns one reference to the result.
func (w *windower) encode(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	return batch.Windowed(w.schema, rec, w.mem)
}
