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

#endif
