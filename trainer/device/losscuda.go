package device

// The loss's device kernels for the cuda backend live beside the loss and
// register with it when imported: wherever this package can open the
// cuda backend, loss.ForwardOn on it runs on the device, not through the
// host.
import _ "github.com/segpipe/segpipe/trainer/loss/losscuda"
