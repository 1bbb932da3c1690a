package remote

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus series. Each Server has its own
// registry, so several servers (tests) never collide.
type metrics struct {
	reg        *prometheus.Registry
	batches    prometheus.Counter
	images     prometheus.Counter
	bytes      prometheus.Counter
	stall      prometheus.Counter
	peerStall  *prometheus.CounterVec
	stalled    prometheus.Counter
	loaderWait prometheus.Counter
	active     prometheus.Gauge
	held       prometheus.Gauge
	refused    *prometheus.CounterVec
	skipped    *prometheus.CounterVec
	// Bytes and images sent by mask transport and compression: their
	// ratio is the bytes an image costs on the wire with that option.
	sentBytes  *prometheus.CounterVec
	sentImages *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "segpipe_serve_batches_total", Help: "Batches sent to clients."}),
		images: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "segpipe_serve_images_total", Help: "Images sent to clients."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "segpipe_serve_bytes_sent_total", Help: "FlightData bytes handed to the transport (protobuf framing included)."}),
		stall: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "segpipe_serve_stall_seconds_total",
			Help: "Time the server waited for clients to take data (flow control), all streams: slow clients."}),
		// Labelled by the peer's address alone, never by anything a ticket
		// says, and removed when that address's last stream ends: at most
		// one series per running stream.
		peerStall: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "segpipe_serve_client_stall_seconds_total",
			Help: "Time the server waited for a client address to take data (flow control), while it has streams running."}, []string{"client"}),
		stalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "segpipe_serve_stalled_streams_total",
			Help: "Streams ended because their client took no data for the stall timeout (--stall-timeout)."}),
		loaderWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "segpipe_serve_loader_wait_seconds_total",
			Help: "Time streams waited for their loader: a server that cannot keep up."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "segpipe_serve_active_streams", Help: "DoGet streams in progress."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "segpipe_serve_transport_batches",
			Help: "Batches taken from loaders and not yet written to the network."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "segpipe_serve_refused_total", Help: "Requests refused, by reason."}, []string{"reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "segpipe_serve_skipped_samples_total", Help: "Samples the loaders of ended streams skipped (damaged shard data, undecodable images), by reason."}, []string{"reason"}),
		// Labelled by the ticket's mask transport and compression, both
		// checked against a closed list (Request.Validate): six series at
		// most.
		sentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "segpipe_serve_transport_bytes_sent_total",
			Help: "FlightData bytes of batches handed to the transport, by mask transport and body compression; divided by segpipe_serve_transport_images_sent_total, the bytes an image costs on the wire."}, []string{"masks", "compression"}),
		sentImages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "segpipe_serve_transport_images_sent_total",
			Help: "Images of the batches counted in segpipe_serve_transport_bytes_sent_total, by mask transport and body compression."}, []string{"masks", "compression"}),
	}
	m.reg.MustRegister(m.batches, m.images, m.bytes, m.stall, m.peerStall, m.stalled, m.loaderWait, m.active, m.held, m.refused, m.skipped, m.sentBytes, m.sentImages,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// streamSent is what one stream has sent, counted into the series of its
// mask transport and compression as it goes.
type streamSent struct {
	bytes, images   prometheus.Counter
	nbytes, nimages int64
}

// sent returns the counter of a stream with the given mask transport and
// compression (as named in logs: "none" for no compression).
func (m *metrics) sent(masks, compression string) *streamSent {
	return &streamSent{bytes: m.sentBytes.WithLabelValues(masks, compression), images: m.sentImages.WithLabelValues(masks, compression)}
}

// add counts one batch of images images sent in bytes bytes.
func (s *streamSent) add(bytes, images int64) {
	s.nbytes += bytes
	s.nimages += images
	s.bytes.Add(float64(bytes))
	s.images.Add(float64(images))
}

// perImage is the stream's bytes per image so far (0 before any image).
func (s *streamSent) perImage() int64 {
	if s.nimages == 0 {
		return 0
	}
	return s.nbytes / s.nimages
}

// attrs are the log attributes of what the stream sent.
func (s *streamSent) attrs() []any {
	return []any{"images", s.nimages, "bytes", s.nbytes, "bytes_per_image", s.perImage()}
}
