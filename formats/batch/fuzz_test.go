package batch

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// FuzzDeserialize feeds arbitrary extension metadata to the tensor type's
// parser: it must never panic, and whatever it accepts must serialize to
// metadata that parses back to an equal type.
func FuzzDeserialize(f *testing.F) {
	for _, s := range []string{`{"shape":[3,4,5]}`, `{"shape":[2,3],"dim_names":["H","W"]}`, `{"shape":[2,3],"permutation":[1,0]}`, `{"shape":[]}`, `{"shape":[-1]}`, `[]`, ``} {
		f.Add(s, int32(6))
	}
	f.Fuzz(func(t *testing.T, md string, n int32) {
		if n <= 0 || n > 1<<20 {
			return
		}
		st := arrow.FixedSizeListOfNonNullable(n, arrow.PrimitiveTypes.Uint8)
		got, err := (&FixedShapeTensorType{}).Deserialize(st, md)
		if err != nil {
			return
		}
		again, err := (&FixedShapeTensorType{}).Deserialize(st, got.Serialize())
		if err != nil {
			t.Fatalf("%q accepted as %s, its serialization %q rejected: %v", md, got, got.Serialize(), err)
		}
		if !got.ExtensionEquals(again) {
			t.Fatalf("%q: %s != %s after a round trip", md, got, again)
		}
	})
}
