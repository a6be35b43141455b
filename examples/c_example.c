/* The C ABI in a few lines: allocate, fill, seal, read back, release. */
#include <stdio.h>
#include <string.h>

#include "gpubroker/gpubroker.h"

int main(void) {
  gpubroker_client_t* client = NULL;
  if (gpubroker_connect(NULL, &client) != GPUBROKER_OK) {
    fprintf(stderr, "connect: %s\n", gpubroker_last_error());
    return 1;
  }
  gpubroker_alloc_options_t options;
  gpubroker_alloc_options_init(&options);
  options.name = "c.example";
  gpubroker_buffer_t* buffer = NULL;
  gpubroker_status_t status = gpubroker_allocate(client, 4096, &options, &buffer);
  if (status != GPUBROKER_OK) {
    fprintf(stderr, "allocate: %s: %s\n", gpubroker_status_name(status), gpubroker_last_error());
    gpubroker_disconnect(client);
    return 1;
  }
  memset(gpubroker_buffer_data(buffer), 7, gpubroker_buffer_size(buffer));
  gpubroker_buffer_seal(buffer);
  printf("buffer %llu '%s' on %s: %llu bytes, sealed=%d\n",
         (unsigned long long)gpubroker_buffer_id(buffer), gpubroker_buffer_name(buffer),
         gpubroker_buffer_device(buffer), (unsigned long long)gpubroker_buffer_size(buffer),
         gpubroker_buffer_is_sealed(buffer));
  gpubroker_buffer_release(buffer);
  gpubroker_disconnect(client);
  return 0;
}
