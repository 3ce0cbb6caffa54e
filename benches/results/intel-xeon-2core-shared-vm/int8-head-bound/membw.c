#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n = (size_t)atof(argv[1])*1024*1024; int pf = atoi(argv[2]);
  char* a = aligned_alloc(64,n); memset(a,1,n);
  __m512i acc=_mm512_setzero_si512(), acc2=acc, acc3=acc, acc4=acc;
  double best=1e9;
  for(int r=0;r<50;r++){
    double t0=now();
    for(size_t i=0;i<n;i+=256){
      if(pf) _mm_prefetch(a+i+pf, _MM_HINT_T0);
      if(pf) _mm_prefetch(a+i+pf+64, _MM_HINT_T0);
      if(pf) _mm_prefetch(a+i+pf+128, _MM_HINT_T0);
      if(pf) _mm_prefetch(a+i+pf+192, _MM_HINT_T0);
      acc=_mm512_add_epi32(acc,_mm512_load_si512(a+i));
      acc2=_mm512_add_epi32(acc2,_mm512_load_si512(a+i+64));
      acc3=_mm512_add_epi32(acc3,_mm512_load_si512(a+i+128));
      acc4=_mm512_add_epi32(acc4,_mm512_load_si512(a+i+192));
    }
    double t=now()-t0; if(t<best)best=t;
  }
  acc=_mm512_add_epi32(_mm512_add_epi32(acc,acc2),_mm512_add_epi32(acc3,acc4));
  printf("%s MB pf=%d: %.1f us, %.1f GB/s (%d)\n",argv[1],pf,best*1e6,n/best/1e9,_mm512_reduce_add_epi32(acc));
}
