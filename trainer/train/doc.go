// Package train is segpipe's YOLO26-seg training loop on the CPU backend:
// loader batches → float [0,1] NCHW input → model forward (train mode) →
// end-to-end loss → backward → gradient accumulation to the nominal batch
// → clipping → optimiser step (MuSGD under optimizer=auto) → EMA, with the
// reference's warmup and linear schedule and the ProgLoss update once per
// epoch end (before validation).
//
// Semantics a user must know:
//
//   - Configuration: DefaultConfig (the reference's defaults), then a JSON
//     file (LoadConfig: present keys replace, unknown keys are errors), then
//     flags (Set); Resolve applies these rules and the resume rules to an
//     Invocation and opens the run's device, once. The augmentation keys
//     are augment.Config's settings of the same names. The model scale is
//     the config's "variant" value; file names carry no meaning. The effective configuration and the category
//     table are written to RUN_DIR/config.json and into every checkpoint's
//     metadata ("config").
//   - Every epoch writes results.csv (training losses = mean one-to-one
//     items, box and mask mAP50 / mAP50-95 of the EMA model on the
//     validation data, learning rate, ProgLoss weight, images/s, loader
//     stall), results.png (one panel per curve), last.safetensors (EMA
//     weights, model-checkpoint format: `segpipe predict --weights`),
//     best.safetensors (highest fitness 0.1·mAP50 + 0.9·mAP50-95 of boxes
//     plus masks) and state.safetensors (raw weights, optimiser buffers and
//     the loop state).
//   - Without validation data the training data is validated (letterboxed,
//     no augmentation): the curve then measures fitting, not generalisation.
//   - Resume continues where the state was saved — an epoch end, an
//     interruption (cancelled context: Ctrl-C in `segpipe train`), an
//     Options.StopAfterIterations split, or every Config.SaveEvery
//     iterations — with the same weights, optimiser buffers, gradients
//     accumulated towards the next step, EMA, schedule position,
//     accumulation phase, ProgLoss updates, loader position and the epoch's
//     loss sums (the loader is a pure function of seed, epoch and position,
//     so no other RNG state exists). Continuing a run this way produces the
//     same weights and loss curve as an uninterrupted run.
//   - Data is transport-neutral: Local streams shards on this machine;
//     `segpipe train --remote` streams the same batches from a segpipe
//     server (pipeline/remote). Loader stall is the time the loop waits in
//     Next, whichever the transport. A training batch may also come in the
//     windowed form (formats/batch's mask_windows and mask_data, from
//     remote's OpenWindowed): on a backend for which ExpandsWindows holds
//     (cuda) the windows and their bytes go up and are expanded on the
//     device; elsewhere they are expanded on the host first. Validation
//     reads masks on the host and takes dense batches.
//   - Validation follows the reference's segmentation validator on the
//     prototype grid (package predict): one-to-one outputs, top-k without
//     NMS, score > conf (0.001), masks sigmoid(coef·proto) cropped to the
//     box, threshold 0.5; metrics.EpochMetric maps areas to original pixels.
//     Validation loads crowd regions too (the batch's iscrowd column) and
//     scores them as COCOeval does: ignored truth that absorbs detections.
//     Training leaves them out (the loss skips flagged instances).
//   - Config.Device binds the run to a backend (package device): the model,
//     the EMA model used for validation, and every tensor op of the step
//     run there. "cpu" and "emu" train with the same numbers; "cuda" runs
//     on GPU 0 and is refused with ErrDevice where no driver, library or
//     GPU is found. The step owns the host↔device boundary: the batch
//     goes up once (batch.go: images, mask stack and iscrowd as the
//     loader's bytes, boxes, classes, boxes_per_image; on a backend that
//     stages batches, cuda, through its double-buffered copy stream, so
//     the next batch's copies run beside this step's backward pass and
//     optimiser), the loss runs on
//     the backend (loss.ForwardOn) and only its items and total come
//     down — on a backend.Fetcher (cuda) a step late: fetched behind the
//     loss kernels and read at the end of the next step, whose work is
//     then queued (stepLoss; trainer.settle before every save). The optimiser, clipping and the EMA run on the backend's own
//     buffers (package optim; the EMA's average is the evaluation model),
//     so the run files are the only other crossing (see hostState). A
//     backend without the loss's kernel takes a counted host round trip
//     of the loss's inputs and gradients instead.
package train
