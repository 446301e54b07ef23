/*
 * fd_int.h - file-descriptor helpers shared inside libcnx.
 */
#ifndef CNX_FD_INT_H
#define CNX_FD_INT_H

#include <stddef.h>

/**
 * Write all len bytes to fd, retrying short writes and EINTR.
 * @return 0, or -1 with errno set.
 */
int cnx__write_all(int fd, const void *data, size_t len);

/**
 * mkdir -p of an absolute path (mode 0755), existing directories fine.
 * @param failed  receives the directory that could not be made
 * @return 0, or -1 with errno set.
 */
int cnx__mkdir_p(const char *path, char *failed, size_t cap);

#endif
