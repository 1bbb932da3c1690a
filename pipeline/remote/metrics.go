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
	}
	m.reg.MustRegister(m.batches, m.images, m.bytes, m.stall, m.peerStall, m.stalled, m.loaderWait, m.active, m.held, m.refused, m.skipped,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
