package jpeg

func idct(b *[64]int32) { idctGo(b) }
