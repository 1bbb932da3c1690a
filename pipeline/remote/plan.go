package remote

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
)

// Plan is what a loader request becomes before any data is opened: the
// loader configuration and the schema of the records its stream carries.
// DoGet and GetFlightInfo derive their streams through it, and so does the
// in-process library (python/native), so that a request is checked, its
// loader started and its records shaped by one code path whichever way the
// batches travel.
type Plan struct {
	Request Request
	// Config is the loader configuration: the request's settings over the
	// resources of a base configuration (Request.Config). A server's
	// admission may still adjust it (a shared image cache) before Open.
	Config pipeline.Config
	// Schema is the schema of the stream's records: the batch schema, or
	// its windowed form for MasksWindowed.
	Schema *arrow.Schema
}

// NewPlan checks req against base (Request.Config: errors wrap
// ErrBadRequest, or ErrOverBudget when the estimate is over
// base.MaxMemory) and derives the stream's schema.
func NewPlan(req Request, base pipeline.Config) (*Plan, error) {
	cfg, err := req.Config(base)
	if err != nil {
		return nil, err
	}
	schema, err := schemaOf(cfg, req.transport())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return &Plan{Request: req, Config: cfg, Schema: schema}, nil
}

// Open starts the plan's loader over src (pipeline.New with Config). The
// caller owns the loader and must Close it.
func (p *Plan) Open(ctx context.Context, src pipeline.Source) (pipeline.Batches, error) {
	return p.open(ctx, src, nil)
}

// open is Open with pipeline.New replaced by newBatches when that is set
// (ServerConfig.newBatches).
func (p *Plan) open(ctx context.Context, src pipeline.Source, newBatches func(context.Context, pipeline.Source, pipeline.Config) (pipeline.Batches, error)) (pipeline.Batches, error) {
	if newBatches == nil {
		newBatches = func(ctx context.Context, src pipeline.Source, cfg pipeline.Config) (pipeline.Batches, error) {
			return pipeline.New(ctx, src, cfg)
		}
	}
	l, err := newBatches(ctx, src, p.Config)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return l, nil
}

// Encode turns a record of the plan's loader into the stream's form: rec
// itself for dense masks; for windowed masks its windowed form
// (batch.Windowed, whose new buffers come from mem), rec released. The
// caller gives its reference to rec and owns one reference to the result.
func (p *Plan) Encode(rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	if p.Request.transport() != MasksWindowed {
		return rec, nil
	}
	out, err := batch.Windowed(p.Schema, rec, mem)
	rec.Release()
	return out, err
}
