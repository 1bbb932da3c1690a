//go:build pqarrow_read_only

package shard

import (
	"errors"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// ErrReadOnly is matched (errors.Is) by the error a Writer returns in a
// build without the Parquet write path (-tags pqarrow_read_only, the edge
// build of scripts/build-small.sh): such a binary reads, verifies and
// streams shards but cannot write them.
var ErrReadOnly = errors.New("writing shards is not in this read-only build (-tags pqarrow_read_only); use the full build (go build, or pip install segpipe)")

// parquetFileWriter is what a shard's writer needs of a Parquet file
// writer. This build links none: arrow-go's writer is what the
// pqarrow_read_only tag leaves out, and with it the compute kernels only
// writing uses.
type parquetFileWriter interface {
	Write(arrow.RecordBatch) error
	AppendKeyValueMetadata(key, value string) error
	Close() error
}

func newParquetFileWriter(*arrow.Schema, io.Writer, *parquet.WriterProperties, pqarrow.ArrowWriterProperties) (parquetFileWriter, error) {
	return nil, ErrReadOnly
}
