// Device code of rdc_link in a translation unit of its own (nvcc -rdc=true).
#include "tests/apps/rdc_link_device.cuh"
