/* port.h - cnx-broker --port (port.c). */
#ifndef CNX_BROKER_PORT_H
#define CNX_BROKER_PORT_H

/* The next count loopback listeners bound to port 0 get first, first + 1,
 * ... instead (0 count: none). */
void broker_ports_claim(int first, int count);

#endif
