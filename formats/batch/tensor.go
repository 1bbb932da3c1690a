package batch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// TensorExtensionName is the canonical Arrow extension name of fixed-shape
// tensors, as written under ARROW:extension:name in IPC metadata.
const TensorExtensionName = "arrow.fixed_shape_tensor"

// FixedShapeTensorType is Arrow's canonical fixed_shape_tensor extension
// type: every value is one row-major tensor of Shape, stored as a
// fixed_size_list<value_type>[prod(Shape)]. The serialized metadata is the
// JSON object {"shape":[...]} (plus "dim_names" and "permutation" when set),
// exactly as the Arrow canonical-extension specification defines it, so
// pyarrow, arrow-rs and Arrow C++ read these columns as tensors.
type FixedShapeTensorType struct {
	arrow.ExtensionBase
	shape       []int
	dimNames    []string
	permutation []int
}

// NewFixedShapeTensorType returns the tensor type of the given element type
// and shape. dimNames may be nil; when set it needs one name per dimension.
func NewFixedShapeTensorType(value arrow.DataType, shape []int, dimNames []string) (*FixedShapeTensorType, error) {
	return newTensorType(value, shape, dimNames, nil)
}

func newTensorType(value arrow.DataType, shape []int, dimNames []string, perm []int) (*FixedShapeTensorType, error) {
	n := 1
	for i, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("fixed_shape_tensor: dimension %d is not positive (%d)", i, d)
		}
		n *= d
	}
	if dimNames != nil && len(dimNames) != len(shape) {
		return nil, fmt.Errorf("fixed_shape_tensor: %d dim_names for %d dimensions", len(dimNames), len(shape))
	}
	if perm != nil {
		if len(perm) != len(shape) {
			return nil, fmt.Errorf("fixed_shape_tensor: permutation of length %d for %d dimensions", len(perm), len(shape))
		}
		seen := make([]bool, len(perm))
		for _, p := range perm {
			if p < 0 || p >= len(perm) || seen[p] {
				return nil, fmt.Errorf("fixed_shape_tensor: permutation %v is not a permutation", perm)
			}
			seen[p] = true
		}
	}
	return &FixedShapeTensorType{
		ExtensionBase: arrow.ExtensionBase{Storage: arrow.FixedSizeListOfNonNullable(int32(n), value)},
		shape:         slices.Clone(shape),
		dimNames:      slices.Clone(dimNames),
		permutation:   slices.Clone(perm),
	}, nil
}

// Shape returns the tensor shape (a copy).
func (t *FixedShapeTensorType) Shape() []int { return slices.Clone(t.shape) }

// ValueType returns the element type.
func (t *FixedShapeTensorType) ValueType() arrow.DataType {
	return t.Storage.(*arrow.FixedSizeListType).Elem()
}

// ExtensionName implements arrow.ExtensionType.
func (*FixedShapeTensorType) ExtensionName() string { return TensorExtensionName }

// ArrayType implements arrow.ExtensionType.
func (*FixedShapeTensorType) ArrayType() reflect.Type { return reflect.TypeOf(FixedShapeTensorArray{}) }

// String describes the type with its value type, shape and options.
func (t *FixedShapeTensorType) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "extension<%s[value_type=%s, shape=%v", TensorExtensionName, t.ValueType(), t.shape)
	if t.dimNames != nil {
		fmt.Fprintf(&b, ", dim_names=%v", t.dimNames)
	}
	if t.permutation != nil {
		fmt.Fprintf(&b, ", permutation=%v", t.permutation)
	}
	b.WriteString("]>")
	return b.String()
}

type tensorMeta struct {
	Shape       []int    `json:"shape"`
	DimNames    []string `json:"dim_names,omitempty"`
	Permutation []int    `json:"permutation,omitempty"`
}

// Serialize implements arrow.ExtensionType: the spec's JSON metadata.
func (t *FixedShapeTensorType) Serialize() string {
	shape := t.shape
	if shape == nil {
		shape = []int{}
	}
	b, _ := json.Marshal(tensorMeta{Shape: shape, DimNames: t.dimNames, Permutation: t.permutation})
	return string(b)
}

// Deserialize implements arrow.ExtensionType. It checks that the storage is
// a fixed_size_list whose length is the product of the shape.
func (*FixedShapeTensorType) Deserialize(storage arrow.DataType, data string) (arrow.ExtensionType, error) {
	fsl, ok := storage.(*arrow.FixedSizeListType)
	if !ok {
		return nil, fmt.Errorf("fixed_shape_tensor: storage %s is not a fixed_size_list", storage)
	}
	var m tensorMeta
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return nil, fmt.Errorf("fixed_shape_tensor: metadata %q: %w", data, err)
	}
	if m.Shape == nil {
		return nil, fmt.Errorf("fixed_shape_tensor: metadata %q has no shape", data)
	}
	t, err := newTensorType(fsl.Elem(), m.Shape, m.DimNames, m.Permutation)
	if err != nil {
		return nil, err
	}
	if n := t.Storage.(*arrow.FixedSizeListType).Len(); n != fsl.Len() {
		return nil, fmt.Errorf("fixed_shape_tensor: shape %v has %d elements, storage list size %d", m.Shape, n, fsl.Len())
	}
	// Keep the storage exactly as read (nullability of the element field).
	t.ExtensionBase = arrow.ExtensionBase{Storage: storage}
	return t, nil
}

// ExtensionEquals implements arrow.ExtensionType.
func (t *FixedShapeTensorType) ExtensionEquals(other arrow.ExtensionType) bool {
	o, ok := other.(*FixedShapeTensorType)
	return ok && arrow.TypeEqual(t.ValueType(), o.ValueType()) &&
		slices.Equal(t.shape, o.shape) && slices.Equal(t.dimNames, o.dimNames) &&
		slices.Equal(t.permutation, o.permutation)
}

// FixedShapeTensorArray is the array type of FixedShapeTensorType.
type FixedShapeTensorArray struct {
	array.ExtensionArrayBase
}

// Values returns the contiguous element buffer of the whole array as bytes
// (all tensors back to back, offset applied). It aliases Arrow memory: valid
// until the array is released.
func (a *FixedShapeTensorArray) Values() []byte {
	st := a.Storage().(*array.FixedSizeList)
	per := int(st.DataType().(*arrow.FixedSizeListType).Len())
	child := st.ListValues().Data()
	if len(child.Buffers()) < 2 || child.Buffers()[1] == nil {
		return nil
	}
	w := child.DataType().(arrow.FixedWidthDataType).BitWidth() / 8
	b := child.Buffers()[1].Bytes()
	start := (child.Offset() + st.Data().Offset()*per) * w
	return b[start : start+st.Len()*per*w]
}

func init() {
	proto, _ := NewFixedShapeTensorType(arrow.PrimitiveTypes.Uint8, []int{1}, nil)
	// A later arrow-go may ship this canonical type itself; its
	// registration then wins and IPC still round-trips the metadata.
	_ = arrow.RegisterExtensionType(proto)
}
