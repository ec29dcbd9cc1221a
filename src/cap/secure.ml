module X = Mirage_crypto_ec.X25519

type keys = { send : Gcm.key; recv : Gcm.key }
type client_state = { port : Port.t; secret : X.secret; eph : string; nonce : string }

let client_hello ?g port =
  let secret, eph = X.gen_key ?g () in
  let eph = Cstruct.to_string eph in
  let nonce = Crypto.random ?g 16 in
  ({ port; secret; eph; nonce }, Wire.Hello { port; eph; nonce })

let client_nonce st = st.nonce

let transcript ~port ~eph_c ~nonce ~session ~eph_s =
  String.concat "" [ "consort-hs-v1"; Port.to_raw port; eph_c; nonce; session; eph_s ]

let derive shared tr =
  let prk = Crypto.hmac ~key:shared [ "consort-wire-v1"; tr ] in
  let k label = Gcm.of_secret (Crypto.hmac ~key:prk [ label ]) in
  (k "client-to-server", k "server-to-client")

let client_finish st ~session ~eph ~public ~signature =
  let tr = transcript ~port:st.port ~eph_c:st.eph ~nonce:st.nonce ~session ~eph_s:eph in
  if not (Port.verify st.port ~public ~signature tr) then
    Error "the server did not prove that it holds the port's key"
  else
    match X.key_exchange st.secret (Cstruct.of_string eph) with
    | Error _ -> Error "bad key share from the server"
    | Ok shared ->
        let c2s, s2c = derive (Cstruct.to_string shared) tr in
        Ok { send = c2s; recv = s2c }

let server_accept ?g key ~session ~eph ~nonce =
  let secret, eph_s = X.gen_key ?g () in
  let eph_s = Cstruct.to_string eph_s in
  match X.key_exchange secret (Cstruct.of_string eph) with
  | Error _ -> Error "bad key share from the client"
  | Ok shared ->
      let port = Port.Key.port key in
      let tr = transcript ~port ~eph_c:eph ~nonce ~session ~eph_s in
      let c2s, s2c = derive (Cstruct.to_string shared) tr in
      let signature = Port.Key.sign key tr in
      Ok
        ( { send = s2c; recv = c2s },
          Wire.Hello_ack { nonce; session; eph = eph_s; public = Port.Key.public key; signature } )

let nonce_of seq =
  let b = Bytes.make 12 '\000' in
  Bytes.set_int64_be b 4 seq;
  Bytes.unsafe_to_string b

let adata session seq =
  let b = Bytes.create 16 in
  Bytes.blit_string session 0 b 0 8;
  Bytes.set_int64_be b 8 seq;
  Bytes.unsafe_to_string b

let seal_cs k ~session ~seq msg =
  Gcm.seal k.send ~nonce:(nonce_of seq) ~adata:(adata session seq) msg

let sealed_length n = n + Gcm.tag_size

let seal_into k ~session ~seq msg dst =
  Gcm.seal_into k.send ~nonce:(nonce_of seq) ~adata:(adata session seq) msg dst

let open_cs k ~session ~seq sealed =
  if Cstruct.length sealed < Gcm.tag_size || String.length session <> 8 then None
  else Gcm.open_ k.recv ~nonce:(nonce_of seq) ~adata:(adata session seq) sealed

let seal2_into k ~session ~seq prefix body ~off ~len dst =
  Gcm.seal2_into k.send ~nonce:(nonce_of seq) ~adata:(adata session seq) prefix body ~off ~len dst

let open_into k ~session ~seq sealed dst =
  Cstruct.length sealed >= Gcm.tag_size
  && String.length session = 8
  && Gcm.open_into k.recv ~nonce:(nonce_of seq) ~adata:(adata session seq) sealed dst

let open_split k ~session ~seq sealed ~head hdst place =
  if Cstruct.length sealed < Gcm.tag_size + head || String.length session <> 8 then `Refused
  else
    Gcm.open_split k.recv ~nonce:(nonce_of seq) ~adata:(adata session seq) sealed ~head hdst place

let seal k ~session ~seq msg = Cstruct.to_string (seal_cs k ~session ~seq (Cstruct.of_string msg))

let open_ k ~session ~seq sealed =
  Option.map Cstruct.to_string (open_cs k ~session ~seq (Cstruct.of_string sealed))

let locate_msg port nonce = String.concat "" [ "consort-locate-v1"; Port.to_raw port; nonce ]
let locate_signature key ~nonce = Port.Key.sign key (locate_msg (Port.Key.port key) nonce)

let badsession_msg port session =
  String.concat "" [ "consort-badsession-v1"; Port.to_raw port; session ]

let badsession_signature key ~session =
  Port.Key.sign key (badsession_msg (Port.Key.port key) session)

let badsession_verify port ~session ~public ~signature =
  Port.verify port ~public ~signature (badsession_msg port session)

let locate_verify port ~nonce ~public ~signature =
  Port.verify port ~public ~signature (locate_msg port nonce)
