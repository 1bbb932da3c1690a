package imagehdr_test

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"

	"github.com/segpipe/segpipe/formats/imagehdr"
)

// A reader checks an image's size from its header before it allocates a
// pixel: a 640×480 PNG passes, the same bytes are refused under a tighter
// byte bound, with an error that says why.
func ExampleRead() {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 640, 480))); err != nil {
		panic(err)
	}
	h, err := imagehdr.Read(b.Bytes())
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Width, h.Height, h.Format, h.DecodeBytes())
	fmt.Println(h.Check(0, 0))
	err = h.Check(0, 1<<20)
	fmt.Println(errors.Is(err, imagehdr.ErrTooLarge))
	// Output:
	// 640 480 png 1228800
	// <nil>
	// true
}
