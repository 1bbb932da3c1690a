/* streamsum: reads a loader's batches through libsegpipe's C ABI and the
 * Arrow C stream interface, as pyarrow does, and prints the batch and image
 * counts, a hash of every image and mask byte, and the resume state. Built
 * for amd64 and arm64 from the same source by scripts/native-arm64-check.sh,
 * it shows that each architecture's library streams the same bytes.
 *
 *   streamsum REQUEST_JSON OPTIONS_JSON
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segpipe.h"

static uint64_t fnv(uint64_t h, const uint8_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* fixed_width reads N of a fixed-size-list format "+w:N". */
static int64_t fixed_width(const struct ArrowSchema *s) {
  if (strncmp(s->format, "+w:", 3) != 0) return -1;
  return atoll(s->format + 3);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: streamsum REQUEST_JSON OPTIONS_JSON\n");
    return 2;
  }
  struct ArrowArrayStream st;
  char err[4096];
  int64_t h = segpipe_open(argv[1], argv[2], &st, err, sizeof err);
  if (h <= 0) {
    fprintf(stderr, "segpipe_open: %s\n", err);
    return 1;
  }
  struct ArrowSchema schema;
  if (st.get_schema(&st, &schema) != 0) {
    fprintf(stderr, "get_schema: %s\n", st.get_last_error(&st));
    return 1;
  }
  /* Column 0 is the image tensor (a fixed-size list of 3*H*W bytes);
   * column 9 the masks (a list of fixed-size lists of Hp*Wp bytes). */
  if (schema.n_children < 10 || strcmp(schema.children[9]->name, "masks") != 0) {
    fprintf(stderr, "not a dense batch schema (%lld columns)\n", (long long)schema.n_children);
    return 1;
  }
  int64_t image_bytes = fixed_width(schema.children[0]);
  int64_t mask_bytes = fixed_width(schema.children[9]->children[0]);
  if (image_bytes <= 0 || mask_bytes <= 0) {
    fprintf(stderr, "unexpected tensor formats %s, %s\n", schema.children[0]->format,
            schema.children[9]->children[0]->format);
    return 1;
  }
  uint64_t hash = 14695981039346656037ULL;
  long long batches = 0, images = 0, instances = 0;
  for (;;) {
    struct ArrowArray a;
    if (st.get_next(&st, &a) != 0) {
      fprintf(stderr, "get_next: %s\n", st.get_last_error(&st));
      return 1;
    }
    if (a.release == NULL) break; /* end of stream */
    const struct ArrowArray *img = a.children[0]->children[0];
    hash = fnv(hash, (const uint8_t *)img->buffers[1] + img->offset, a.length * image_bytes);
    const struct ArrowArray *masks = a.children[9];
    const int32_t *offs = (const int32_t *)masks->buffers[1] + masks->offset;
    int64_t n = offs[masks->length] - offs[0];
    const struct ArrowArray *mv = masks->children[0]->children[0];
    hash = fnv(hash, (const uint8_t *)mv->buffers[1] + mv->offset + offs[0] * mask_bytes, n * mask_bytes);
    batches++;
    images += a.length;
    instances += n;
    a.release(&a);
  }
  char state[256];
  if (segpipe_state(h, state, sizeof state) < 0) {
    fprintf(stderr, "segpipe_state failed\n");
    return 1;
  }
  schema.release(&schema);
  st.release(&st);
  segpipe_close(h);
  printf("%lld batches, %lld images, %lld instances, bytes fnv64 %016llx, state %s\n", batches, images, instances,
         (unsigned long long)hash, state);
  return 0;
}
