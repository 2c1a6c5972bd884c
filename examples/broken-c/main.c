#include <stdio.h>

/* A small C program with two compile errors, for trying kiln. */

static int square(int x) {
    return x * x
}

int main(void) {
    int total = 0;
    for (int i = 1; i <= 3; i++) {
        total += square(i);
    }
    printf("sum of squares: %d\n", totl);
    return 0;
}
