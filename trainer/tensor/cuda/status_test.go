package cuda

import (
	"errors"
	"testing"
)

func TestStatusNames(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{driverErrorName(0), "CUDA_SUCCESS"},
		{driverErrorName(2), "CUDA_ERROR_OUT_OF_MEMORY"},
		{driverErrorName(100), "CUDA_ERROR_NO_DEVICE"},
		{driverErrorName(218), "CUDA_ERROR_INVALID_PTX"},
		{driverErrorName(222), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
		{driverErrorName(700), "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{driverErrorName(999), "CUDA_ERROR_UNKNOWN"},
		{driverErrorName(12345), "CUDA_ERROR_12345"},
		{cublasStatusName(7), "CUBLAS_STATUS_INVALID_VALUE"},
		{cublasStatusName(13), "CUBLAS_STATUS_EXECUTION_FAILED"},
		{cublasStatusName(99), "CUBLAS_STATUS_99"},
		{cudnnStatusName(0), "CUDNN_STATUS_SUCCESS"},
		{cudnnStatusName(2000), "CUDNN_STATUS_BAD_PARAM"},
		{cudnnStatusName(2002), "CUDNN_STATUS_BAD_PARAM_2002"},
		{cudnnStatusName(3000), "CUDNN_STATUS_NOT_SUPPORTED"},
		{cudnnStatusName(5003), "CUDNN_STATUS_EXECUTION_FAILED_5003"},
		{cudnnStatusName(7), "CUDNN_STATUS_7"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
}

func TestStatusError(t *testing.T) {
	s := &status{Lib: "cuda", Call: "cuInit", Code: 100, Name: driverErrorName(100), Detail: "no CUDA-capable device is detected"}
	if got, want := s.Error(), "cuda: cuInit returned CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(s, ErrUnavailable) {
		t.Error("no device should read as ErrUnavailable")
	}
	oom := &status{Lib: "cuda", Call: "cuMemAllocAsync", Code: 2, Name: driverErrorName(2)}
	if errors.Is(oom, ErrUnavailable) {
		t.Error("out of memory is a failure, not unavailability")
	}
}
