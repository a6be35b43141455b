/* Opens the producer's buffer in another process, checks every byte where it
 * lies, then frees it. Built with nothing but `pkg-config gpubroker`.
 * Usage: reader SOCKET_DIR NAME */
#include <gpubroker/gpubroker.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char** argv) {
  gpubroker_client_t* client = NULL;
  gpubroker_open_options_t options;
  gpubroker_buffer_t* buffer = NULL;
  const uint8_t* bytes;
  uint64_t i, size;
  if (argc != 3) {
    fprintf(stderr, "usage: reader SOCKET_DIR NAME\n");
    return 2;
  }
  if (gpubroker_connect(argv[1], &client) != GPUBROKER_OK) {
    fprintf(stderr, "reader: connect: %s\n", gpubroker_last_error());
    return 1;
  }
  gpubroker_open_options_init(&options);
  if (gpubroker_open(client, argv[2], &options, &buffer) != GPUBROKER_OK) {
    fprintf(stderr, "reader: open: %s\n", gpubroker_last_error());
    return 1;
  }
  bytes = (const uint8_t*)gpubroker_buffer_data(buffer);
  size = gpubroker_buffer_size(buffer);
  for (i = 0; i < size; ++i) {
    if (bytes[i] != (uint8_t)(i * 7 % 251)) {
      fprintf(stderr, "reader: byte %llu is %u\n", (unsigned long long)i, bytes[i]);
      return 1;
    }
  }
  printf("reader: %llu bytes of '%s' as written (library %s)\n", (unsigned long long)size,
         gpubroker_buffer_name(buffer), gpubroker_version());
  gpubroker_buffer_release(buffer);
  if (gpubroker_free(client, argv[2]) != GPUBROKER_OK) {
    fprintf(stderr, "reader: free: %s\n", gpubroker_last_error());
    return 1;
  }
  gpubroker_disconnect(client);
  return 0;
}
