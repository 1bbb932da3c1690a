package cuda

import (
	"errors"
	"testing"
)

func TestStatusNames(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{DriverErrorName(0), "CUDA_SUCCESS"},
		{DriverErrorName(2), "CUDA_ERROR_OUT_OF_MEMORY"},
		{DriverErrorName(100), "CUDA_ERROR_NO_DEVICE"},
		{DriverErrorName(218), "CUDA_ERROR_INVALID_PTX"},
		{DriverErrorName(222), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
		{DriverErrorName(700), "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{DriverErrorName(999), "CUDA_ERROR_UNKNOWN"},
		{DriverErrorName(12345), "CUDA_ERROR_12345"},
		{CublasStatusName(7), "CUBLAS_STATUS_INVALID_VALUE"},
		{CublasStatusName(13), "CUBLAS_STATUS_EXECUTION_FAILED"},
		{CublasStatusName(99), "CUBLAS_STATUS_99"},
		{CudnnStatusName(0), "CUDNN_STATUS_SUCCESS"},
		{CudnnStatusName(2000), "CUDNN_STATUS_BAD_PARAM"},
		{CudnnStatusName(2002), "CUDNN_STATUS_BAD_PARAM_2002"},
		{CudnnStatusName(3000), "CUDNN_STATUS_NOT_SUPPORTED"},
		{CudnnStatusName(5003), "CUDNN_STATUS_EXECUTION_FAILED_5003"},
		{CudnnStatusName(7), "CUDNN_STATUS_7"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
}

func TestStatusError(t *testing.T) {
	s := &Status{Lib: "cuda", Call: "cuInit", Code: 100, Name: DriverErrorName(100), Detail: "no CUDA-capable device is detected"}
	if got, want := s.Error(), "cuda: cuInit returned CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(s, ErrUnavailable) {
		t.Error("no device should read as ErrUnavailable")
	}
	oom := &Status{Lib: "cuda", Call: "cuMemAllocAsync", Code: 2, Name: DriverErrorName(2)}
	if errors.Is(oom, ErrUnavailable) {
		t.Error("out of memory is a failure, not unavailability")
	}
}
