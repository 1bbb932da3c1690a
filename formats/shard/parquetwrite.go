//go:build !pqarrow_read_only

package shard

import (
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parquetFileWriter is the Parquet file writer a shard is written through.
// It is arrow-go's own; the read-only build (-tags pqarrow_read_only, which
// leaves arrow-go's write path out) has a writer that refuses instead.
type parquetFileWriter = *pqarrow.FileWriter

func newParquetFileWriter(sc *arrow.Schema, w io.Writer, props *parquet.WriterProperties, aprops pqarrow.ArrowWriterProperties) (parquetFileWriter, error) {
	return pqarrow.NewFileWriter(sc, w, props, aprops)
}
