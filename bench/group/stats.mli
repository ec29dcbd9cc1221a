(** Summaries of samples: medians and percentiles. *)

val percentile : float array -> float -> float
(** [percentile xs p] is the [p]-th percentile (0 to 100) of [xs], by the nearest-rank method; [nan]
    if [xs] is empty. [xs] is not modified. *)

val median : float array -> float
(** [median xs] is [percentile xs 50.]. *)

val mean : float array -> float
(** [mean xs] is the arithmetic mean of [xs]; [nan] if empty. *)

val min : float array -> float
(** [min xs] is the least sample; [nan] if empty. *)

val max : float array -> float
(** [max xs] is the greatest sample; [nan] if empty. *)

val json_float : float -> string
(** [json_float x] is [x] with three decimals, or [null] if [x] is not finite. *)
